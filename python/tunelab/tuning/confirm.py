"""Confirmation: re-measure the best candidates, the default config and every baseline, interleaved, and decide.

The search ranks configs on short measurements (and picks the minimum of many noisy numbers, which is biased
low). Confirmation re-measures the top-K configs, the family's default config and every baseline ``rounds``
times, interleaved A B C A B C ..., so slow drifts (clocks, temperature) hit all arms alike. Then:

* each arm's median with a BCa bootstrap 95% CI;
* the best candidate is the config arm (top-K or default) with the lowest confirmed median; the best
  baseline likewise among baselines. Picking the minimum of a few arms biases that arm's median slightly low;
  both sides of the comparison are picked the same way, and the CI of the ratio is computed on the
  interleaved rounds of the two chosen arms (paired bootstrap, see :mod:`tunelab.stats`);
* verdict: a win when the speedup CI's lower bound clears the target; speedups over the default config
  (what tuning bought) and over every baseline are reported too.

Without baselines (a user kernel that declares none) the verdict is taken against the default config.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tunelab import stats
from tunelab.tuning.backend import Arm
from tunelab.tuning.space import Config, SearchSpace
from tunelab.tuning.study import Memory


@dataclass
class ArmResult:
    """One confirmed arm: its samples (µs), summary and median CI."""

    label: str
    kind: str
    config: Config | None
    baseline: str | None
    samples: list[float]
    summary: dict
    ci: stats.CI
    is_default: bool = False
    search_value: float | None = None  # the median the search measured, for comparison

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"label": self.label, "kind": self.kind, "config": self.config, "baseline": self.baseline,
                "samples_us": [round(float(x), 4) for x in self.samples], "summary": self.summary,
                "ci": self.ci.to_dict(), "is_default": self.is_default, "search_value": self.search_value}

    @classmethod
    def from_dict(cls, d: dict) -> "ArmResult":
        """Inverse of :meth:`to_dict`."""
        return cls(d["label"], d["kind"], d.get("config"), d.get("baseline"), list(d.get("samples_us", [])),
                   d.get("summary", {}), stats.CI.from_dict(d["ci"]), d.get("is_default", False),
                   d.get("search_value"))


@dataclass
class Confirmation:
    """Everything confirmation measured and concluded."""

    rounds: int
    arms: list[ArmResult]
    best: str | None
    best_baseline: str | None
    verdict: stats.Verdict | None
    speedup_vs_baseline: stats.CI | None
    speedup_vs_default: stats.CI | None
    speedups: dict[str, stats.CI] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    measure_s: float = 0.0

    def arm(self, label: str) -> ArmResult:
        """The arm called ``label``."""
        for a in self.arms:
            if a.label == label:
                return a
        raise KeyError(label)

    @property
    def best_config(self) -> Config | None:
        """Config of the best confirmed candidate."""
        return None if self.best is None else self.arm(self.best).config

    def to_dict(self) -> dict:
        """JSON-ready form."""
        def ci(x):
            return None if x is None else x.to_dict()

        return {"rounds": self.rounds, "arms": [a.to_dict() for a in self.arms], "best": self.best,
                "best_baseline": self.best_baseline,
                "verdict": None if self.verdict is None else self.verdict.to_dict(),
                "speedup_vs_baseline": ci(self.speedup_vs_baseline),
                "speedup_vs_default": ci(self.speedup_vs_default),
                "speedups": {k: v.to_dict() for k, v in self.speedups.items()},
                "errors": dict(self.errors), "notes": list(self.notes), "measure_s": self.measure_s}

    @classmethod
    def from_dict(cls, d: dict) -> "Confirmation":
        """Inverse of :meth:`to_dict`."""
        def ci(x):
            return None if x is None else stats.CI.from_dict(x)

        return cls(d["rounds"], [ArmResult.from_dict(a) for a in d["arms"]], d.get("best"), d.get("best_baseline"),
                   None if d.get("verdict") is None else stats.Verdict.from_dict(d["verdict"]),
                   ci(d.get("speedup_vs_baseline")), ci(d.get("speedup_vs_default")),
                   {k: stats.CI.from_dict(v) for k, v in d.get("speedups", {}).items()},
                   dict(d.get("errors", {})), list(d.get("notes", [])), d.get("measure_s", 0.0))


def choose_arms(memory: Memory, space: SearchSpace, default_config: Config | None, baselines: list[str],
                top_k: int = 3) -> tuple[list[Arm], dict[str, float], list[str]]:
    """Arms to confirm: top-K measured configs, the default config, every baseline.

    Returns (arms, search medians by label, notes). The default config is confirmed even when the search never
    measured it; a default the gates rejected is left out with a note.
    """
    notes: list[str] = []
    by_key = memory.by_key
    ranked_keys = sorted((key for key, k in by_key.items() if k.status == "ok"), key=lambda key: by_key[key].value)
    arms, search_values = [], {}
    default_key = space.key(default_config) if default_config is not None else None
    for i, key in enumerate(ranked_keys[:top_k]):
        label = f"candidate {i + 1}"
        arms.append(Arm(label, "config", config=space.from_key(key)))
        search_values[label] = by_key[key].value
    if len(ranked_keys) < top_k:
        notes.append(f"only {len(ranked_keys)} config(s) passed every gate; confirming those")
    # A default config among the top K is already an arm (analyse() flags it as the default).
    if default_config is not None and default_key not in ranked_keys[:top_k]:
        known = by_key.get(default_key)
        if known is not None and known.status != "ok":
            notes.append(f"the default config was rejected during the search ({known.code}); "
                         "no speedup over the default is reported")
        else:
            arms.append(Arm("default", "config", config=space.validate(default_config)))
            if known is not None:
                search_values["default"] = known.value
    for name in baselines:
        arms.append(Arm(name, "baseline", baseline=name))
    return arms, search_values, notes


def analyse(arms: list[Arm], data, rounds: int, target: float, default_key: str | None, space: SearchSpace,
            search_values: dict[str, float] | None = None, notes: list[str] | None = None,
            n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0) -> Confirmation:
    """Turn confirmation samples into CIs, the best candidate, speedups and the verdict."""
    search_values = search_values or {}
    notes = list(notes or [])
    results: list[ArmResult] = []
    for i, arm in enumerate(arms):
        samples = data.samples.get(arm.label)
        if not samples:
            continue
        is_default = arm.kind == "config" and default_key is not None and space.key(arm.config) == default_key
        results.append(ArmResult(arm.label, arm.kind, arm.config, arm.baseline, list(samples),
                                 stats.summarize(samples),
                                 stats.median_ci(samples, n_resamples=n_resamples, seed=seed + i),
                                 is_default, search_values.get(arm.label)))
    configs = [a for a in results if a.kind == "config"]
    bases = [a for a in results if a.kind == "baseline"]
    best = min(configs, key=lambda a: a.summary["median"]) if configs else None
    best_base = min(bases, key=lambda a: a.summary["median"]) if bases else None
    default = next((a for a in configs if a.is_default), None)
    conf = Confirmation(rounds, results, best.label if best else None, best_base.label if best_base else None,
                        None, None, None, errors=dict(data.errors), notes=notes,
                        measure_s=getattr(data, "measure_s", 0.0))
    if best is None:
        conf.notes.append("no candidate could be confirmed")
        return conf
    if default is not None:
        conf.speedup_vs_default = stats.speedup_ci(default.samples, best.samples, n_resamples=n_resamples,
                                                   seed=seed + 101)
    for b in bases:
        conf.speedups[b.label] = stats.speedup_ci(b.samples, best.samples, n_resamples=n_resamples,
                                                  seed=seed + 202 + len(conf.speedups))
    if best_base is not None:
        conf.speedup_vs_baseline = conf.speedups[best_base.label]
        conf.verdict = stats.decide(conf.speedup_vs_baseline, target, against=best_base.label,
                                    candidate_latency=best.ci, baseline_latency=best_base.ci)
    elif default is not None:
        conf.notes.append("no baseline available: the verdict compares against the default config")
        conf.verdict = stats.decide(conf.speedup_vs_default, target, against="default config",
                                    candidate_latency=best.ci, baseline_latency=default.ci)
    return conf


def run_confirmation(evaluator, memory: Memory, space: SearchSpace, default_config: Config | None,
                     baselines: list[str], *, top_k: int = 3, rounds: int = 100, target: float = 1.10,
                     seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES) -> Confirmation:
    """Choose the arms, measure them interleaved with ``evaluator.confirm`` and analyse."""
    import time

    arms, search_values, notes = choose_arms(memory, space, default_config, baselines, top_k)
    if not any(a.kind == "config" for a in arms):
        return Confirmation(rounds, [], None, None, None, None, None, notes=notes + ["nothing to confirm"])
    t0 = time.perf_counter()
    data = evaluator.confirm(arms, rounds, seed)
    if not getattr(data, "measure_s", 0.0):
        data.measure_s = time.perf_counter() - t0
    default_key = space.key(default_config) if default_config is not None else None
    return analyse(arms, data, rounds, target, default_key, space, search_values, notes, n_resamples, seed)
