"""Bootstrap CIs (coverage on synthetic data with a known answer), verdict logic, exact random-search count."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tunelab import stats


def test_median_ci_coverage_known_median():
    # Log-normal latencies: the population median is exactly mu. 200 experiments of 60 samples each; a 95%
    # interval should cover it about 95% of the time. Binomial sd at 200 reps is 1.5%, so [0.88, 0.99] is a
    # band of about 4.5 sd below and 2.5 sd above.
    rng = np.random.default_rng(12345)
    mu, n, reps, hits = 50.0, 60, 200, 0
    for r in range(reps):
        x = mu * np.exp(rng.normal(0, 0.05, n))
        ci = stats.median_ci(x, n_resamples=999, seed=r)
        hits += ci.low <= mu <= ci.high
    assert 0.88 <= hits / reps <= 0.99, hits / reps


def test_speedup_ci_coverage_paired_with_drift():
    # Baseline 1.2x slower than the candidate; both see the same per-round drift (as in interleaved rounds).
    rng = np.random.default_rng(7)
    true, n, reps, hits = 1.2, 60, 200, 0
    for r in range(reps):
        drift = np.exp(rng.normal(0, 0.03, n))
        cand = 40.0 * drift * np.exp(rng.normal(0, 0.02, n))
        base = 48.0 * drift * np.exp(rng.normal(0, 0.02, n))
        ci = stats.speedup_ci(base, cand, n_resamples=999, seed=r)
        assert ci.method.endswith("/paired")
        hits += ci.low <= true <= ci.high
    assert 0.88 <= hits / reps <= 0.99, hits / reps


def test_paired_is_narrower_than_independent_under_shared_drift():
    rng = np.random.default_rng(3)
    drift = np.exp(rng.normal(0, 0.05, 100))
    cand = 40.0 * drift * np.exp(rng.normal(0, 0.01, 100))
    base = 48.0 * drift * np.exp(rng.normal(0, 0.01, 100))
    p = stats.speedup_ci(base, cand, paired=True, n_resamples=1999, seed=0)
    i = stats.speedup_ci(base, cand, paired=False, n_resamples=1999, seed=0)
    assert (p.high - p.low) < (i.high - i.low)


def test_degenerate_and_small_inputs():
    ci = stats.median_ci([5.0, 5.0, 5.0, 5.0])
    assert (ci.estimate, ci.low, ci.high, ci.method) == (5.0, 5.0, 5.0, "degenerate")
    assert stats.median_ci([1.0]).method == "degenerate"
    with pytest.raises(ValueError):
        stats.median_ci([])
    with pytest.raises(ValueError):
        stats.speedup_ci([1, 2, 3], [1, 2], paired=True)
    # different lengths fall back to independent resampling
    assert stats.speedup_ci([1.0, 1.1, 1.2, 1.3], [1.0, 1.05, 1.1], n_resamples=199).method.endswith("independent")


def test_verdict_logic():
    win = stats.decide(stats.CI(1.3, 1.2, 1.4), 1.10, "sdpa")
    assert win.win and win.label == "win" and "lower bound clears" in win.text
    # estimate above target but lower bound below: not established
    near = stats.decide(stats.CI(1.15, 1.05, 1.25), 1.10, "sdpa")
    assert not near.win and near.label == "no win" and "not established" in near.text
    # exactly at the target counts as a win (lower bound >= target)
    assert stats.decide(stats.CI(1.2, 1.10, 1.3), 1.10).win
    slower = stats.decide(stats.CI(0.8, 0.75, 0.85), 1.10, "sdpa")
    assert not slower.win and slower.significantly_slower and "significantly slower" in slower.text
    below = stats.decide(stats.CI(1.02, 0.98, 1.06), 1.10)
    assert not below.win and not below.significantly_slower and "below the target" in below.text
    # latency CIs reported
    v = stats.decide(stats.CI(1.3, 1.2, 1.4), 1.1, candidate_latency=stats.CI(40, 39, 41),
                     baseline_latency=stats.CI(52, 51, 53))
    assert v.latency_cis_overlap is False and "do not overlap" in v.text
    with pytest.raises(ValueError):
        stats.decide(stats.CI(1, 1, 1), 0)
    assert stats.Verdict.from_dict(v.to_dict()) == v


def test_expected_random_draws_exact():
    assert stats.expected_random_draws(9, 1) == 5.0
    assert stats.expected_random_draws(10, 10) == pytest.approx(1.0)
    # simulate draws without replacement
    rng = np.random.default_rng(0)
    n, k = 50, 4
    draws = [int(np.argmax(rng.permutation(n) < k)) + 1 for _ in range(20000)]
    assert np.mean(draws) == pytest.approx(stats.expected_random_draws(n, k), rel=0.03)
    with pytest.raises(ValueError):
        stats.expected_random_draws(5, 0)


def test_summarize():
    s = stats.summarize([1, 2, 3, 4, 100])
    assert s["n"] == 5 and s["median"] == 3 and s["max"] == 100 and math.isclose(s["mean"], 22)
    assert stats.summarize([]) == {"n": 0}
