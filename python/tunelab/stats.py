"""Statistics for honest comparisons: sample summaries, bootstrap CIs of medians and speedups, verdicts.

The statistic is always the **median** (robust to the occasional preempted or clock-throttled sample). Its 95%
confidence interval comes from ``scipy.stats.bootstrap`` with the BCa method (bias-corrected and accelerated).

Speedup = median(baseline) / median(candidate). Its CI resamples **paired by round**: the confirmation
measures the arms interleaved (A B C A B C ...), so round *i* of every arm saw the same clock, temperature and
background load. Resampling whole rounds keeps that shared drift inside each bootstrap replicate, which is what
the interleaving was for; resampling the arms independently would also be valid but treats the drift as extra
noise and gives a wider interval when drift is present. When the arms have different lengths (not produced by
our confirmation) the resampling falls back to independent.

Verdict: a **win** only when the lower bound of the speedup CI is at least the target (default 1.10).
Anything else is reported as **no win**, with the numbers, and says whether the candidate is significantly
slower (upper bound below 1).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 9999


@dataclass(frozen=True)
class CI:
    """A point estimate with a confidence interval; ``method`` says how the interval was obtained."""

    estimate: float
    low: float
    high: float
    confidence: float = DEFAULT_CONFIDENCE
    method: str = "BCa"

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CI":
        """Inverse of :meth:`to_dict`."""
        return cls(**d)

    def overlaps(self, other: "CI") -> bool:
        """True when the two intervals share at least one point."""
        return not (self.high < other.low or other.high < self.low)

    def __iter__(self):
        # Lets callers write ``lo, hi = result.ci`` style unpacking of (low, high).
        return iter((self.low, self.high))

    def __str__(self) -> str:
        return f"{self.estimate:.4g} [{self.low:.4g}, {self.high:.4g}]"


def summarize(samples: Sequence[float]) -> dict:
    """Summary of timing samples (µs): n, median, mean, std, min, max, p10, p90, iqr.

    Empty input gives ``{"n": 0}``.
    """
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        return {"n": 0}
    q10, q25, q50, q75, q90 = np.percentile(x, [10, 25, 50, 75, 90])
    return {
        "n": int(x.size), "median": float(q50), "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min": float(x.min()), "max": float(x.max()), "p10": float(q10), "p90": float(q90),
        "iqr": float(q75 - q25),
    }


def _median_stat(x, axis=-1):
    return np.median(x, axis=axis)


def _ratio_of_medians(b, c, axis=-1):
    return np.median(b, axis=axis) / np.median(c, axis=axis)


def _bootstrap(data: tuple, statistic, paired: bool, confidence: float, n_resamples: int,
               method: str, seed) -> tuple[float, float, str]:
    from scipy import stats

    rng = np.random.default_rng(seed)
    for m in (method, "percentile"):
        with warnings.catch_warnings():
            # Degenerate data (every sample equal) makes BCa undefined; scipy warns and returns NaN, and we fall
            # back to the percentile interval, recording which method produced the numbers.
            warnings.simplefilter("ignore")
            try:
                res = stats.bootstrap(data, statistic, paired=paired, vectorized=True, axis=-1,
                                      confidence_level=confidence, n_resamples=n_resamples, method=m,
                                      random_state=rng)
            except (ValueError, FloatingPointError):
                continue
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi, m
    return math.nan, math.nan, "none"


def median_ci(samples: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
              n_resamples: int = DEFAULT_RESAMPLES, method: str = "BCa", seed=None) -> CI:
    """Median of ``samples`` with a bootstrap CI (BCa by default; percentile if BCa is undefined).

    Fewer than 3 samples or identical samples give a zero-width interval at the median (there is nothing to
    resample), recorded as method ``"degenerate"``.
    """
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("median_ci needs at least one sample")
    est = float(np.median(x))
    if x.size < 3 or np.all(x == x[0]):
        return CI(est, est, est, confidence, "degenerate")
    lo, hi, m = _bootstrap((x,), _median_stat, False, confidence, n_resamples, method, seed)
    if m == "none":
        return CI(est, est, est, confidence, "degenerate")
    return CI(est, lo, hi, confidence, m)


def speedup_ci(baseline: Sequence[float], candidate: Sequence[float], paired: bool | None = None,
               confidence: float = DEFAULT_CONFIDENCE, n_resamples: int = DEFAULT_RESAMPLES,
               method: str = "BCa", seed=None) -> CI:
    """Speedup of ``candidate`` over ``baseline``: median(baseline) / median(candidate), with a bootstrap CI.

    ``paired=None`` pairs by round when both have the same length (interleaved confirmation), else resamples
    independently. > 1 means the candidate is faster.
    """
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    if b.size == 0 or c.size == 0:
        raise ValueError("speedup_ci needs samples for both the baseline and the candidate")
    if paired is None:
        paired = b.size == c.size
    if paired and b.size != c.size:
        raise ValueError(f"paired resampling needs equal lengths, got {b.size} and {c.size}")
    est = float(np.median(b) / np.median(c))
    if min(b.size, c.size) < 3 or (np.all(b == b[0]) and np.all(c == c[0])):
        return CI(est, est, est, confidence, "degenerate")
    lo, hi, m = _bootstrap((b, c), _ratio_of_medians, paired, confidence, n_resamples, method, seed)
    if m == "none":
        return CI(est, est, est, confidence, "degenerate")
    return CI(est, lo, hi, confidence, m + ("/paired" if paired else "/independent"))


@dataclass(frozen=True)
class Verdict:
    """Outcome of a comparison: ``label`` is ``"win"`` or ``"no win"``; ``text`` explains it with numbers."""

    label: str
    win: bool
    target: float
    speedup: CI
    against: str
    significantly_slower: bool
    latency_cis_overlap: bool | None
    text: str

    def to_dict(self) -> dict:
        """JSON-ready form."""
        d = asdict(self)
        d["speedup"] = self.speedup.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["speedup"] = CI.from_dict(d["speedup"])
        return cls(**d)


def decide(speedup: CI, target: float = 1.10, against: str = "baseline",
           candidate_latency: CI | None = None, baseline_latency: CI | None = None) -> Verdict:
    """The verdict for a speedup CI: a win only when ``speedup.low >= target``.

    Latency CIs, when given, are compared too (non-overlapping intervals are a second, cruder signal that the
    difference is real; they are reported, not used for the decision).
    """
    if target <= 0 or not math.isfinite(target):
        raise ValueError(f"target speedup must be a positive number, got {target!r}")
    win = bool(math.isfinite(speedup.low) and speedup.low >= target)
    slower = bool(math.isfinite(speedup.high) and speedup.high < 1.0)
    overlap = None
    if candidate_latency is not None and baseline_latency is not None:
        overlap = candidate_latency.overlaps(baseline_latency)
    pct = int(round(speedup.confidence * 100))
    numbers = (f"speedup over {against} {speedup.estimate:.3f}x, {pct}% CI [{speedup.low:.3f}, "
               f"{speedup.high:.3f}] ({speedup.method})")
    if win:
        text = f"win: {numbers}; the lower bound clears the target {target:.2f}x"
    elif slower:
        text = f"no win: {numbers}; the candidate is significantly slower than {against}"
    elif speedup.estimate >= target:
        text = (f"no win: {numbers}; the estimate reaches the target {target:.2f}x but the lower bound does "
                "not, so the gain is not established")
    else:
        text = f"no win: {numbers}; below the target {target:.2f}x"
    if overlap is not None:
        text += "; latency CIs " + ("overlap" if overlap else "do not overlap")
    return Verdict("win" if win else "no win", win, float(target), speedup, against, slower, overlap, text)


def expected_random_draws(n_valid: int, n_good: int) -> float:
    """Expected number of draws without replacement until the first of ``n_good`` good items among ``n_valid``.

    Exact: (N + 1) / (K + 1). Random search over a finite space that never repeats a config follows this.
    """
    if n_good <= 0 or n_valid <= 0 or n_good > n_valid:
        raise ValueError(f"need 0 < n_good <= n_valid, got n_good={n_good}, n_valid={n_valid}")
    return (n_valid + 1) / (n_good + 1)
