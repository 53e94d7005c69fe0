"""Synthetic replay files, for development and for running the notebook and CPU tests without a GPU.

Nothing here is a measurement. A synthetic replay is labelled ``device.synthetic = true``; results tuned from
it say ``mode: replay`` and are never stored. Real ground truth comes from ``benchmarks/ground_truth.py``.

:func:`synthetic_latency` gives any search space a deterministic landscape: for each ordered parameter a
preferred choice (picked from the seed) with a cost growing with the distance from it, pairwise interactions
between neighbouring parameters, and per-config irregularity, so the optimum is known but not trivially
separable. :func:`synthetic_attention_replay` applies it to the attention space (the real family's when it
imports, else a stand-in with the same kind of parameters), with baselines at the seed-workload figures of
ANCHORS.md.
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Mapping

import numpy as np

from tunelab.tuning.family import Rejection, TunableFamily
from tunelab.tuning.space import Config, Constraint, Param, SearchSpace, config_key

#: Seed-workload baselines from ANCHORS.md (B16 H16 S512 D64 fp16, H200), in µs.
ANCHOR_BASELINES_US = {"sdpa_default": 50.2, "sdpa_cudnn": 50.9, "sdpa_flash": 75.1, "sdpa_efficient": 150.0}
SEED_PROBLEM = {"batch": 16, "heads": 16, "seq_q": 512, "seq_k": 512, "head_dim": 64, "dtype": "float16",
                "causal": False}


def _unit_hash(*parts: Any) -> float:
    h = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(h[:12], 16) / float(16 ** 12)


def synthetic_latency(space: SearchSpace, seed: int = 0, best_us: float = 40.0,
                      irregularity: float = 0.03) -> Callable[[Mapping[str, Any]], float]:
    """A deterministic latency model over ``space`` with a unique optimum of ``best_us``."""
    params = list(space.params)
    prefer = {p.name: int(_unit_hash(seed, "prefer", p.name) * len(p)) for p in params}
    weight = {p.name: 0.05 + 0.25 * _unit_hash(seed, "weight", p.name) for p in params}
    optimum = {p.name: p.choices[prefer[p.name]] for p in params}

    def latency(config: Mapping[str, Any]) -> float:
        idx = {p.name: p.index(config[p.name]) for p in params}
        if all(idx[n] == prefer[n] for n in idx):
            return best_us
        t = best_us
        for p in params:
            span = max(1, len(p) - 1)
            d = abs(idx[p.name] - prefer[p.name]) / span
            t *= 1 + weight[p.name] * (d ** 1.2 if p.ordered else (1.0 if d else 0.0)) * 0.6
        for a, b in zip(params, params[1:]):  # neighbouring tunables interact (tile M with tile N, ...)
            da = (idx[a.name] - prefer[a.name]) / max(1, len(a) - 1)
            db = (idx[b.name] - prefer[b.name]) / max(1, len(b) - 1)
            t *= 1 + 0.04 * abs(da - db)
        jitter = 1 + irregularity * (2 * _unit_hash(seed, "jitter", config_key(dict(config))) - 1)
        return max(best_us * 1.004, t * jitter)

    latency.optimum = optimum  # type: ignore[attr-defined]
    return latency


def standin_attention_space() -> SearchSpace:
    """An attention-like space (tiles, warps, stages, swizzle) used when the real family does not import."""
    return SearchSpace(
        "attention/stand-in",
        params=[Param("BLOCK_M", [64, 128, 192, 256]), Param("BLOCK_N", [32, 64, 96, 128, 176]),
                Param("NUM_WARPS", [4, 8, 12, 16]), Param("NUM_STAGES", [1, 2, 3]),
                Param("SWIZZLE", [False, True])],
        constraints=[Constraint("warps_cover_block_m", lambda c: c["BLOCK_M"] % (16 * (c["NUM_WARPS"] // 4)) == 0
                                and c["BLOCK_M"] >= 16 * c["NUM_WARPS"] // 2,
                                "each warp owns 16*k rows of BLOCK_M", code="static.divisibility")])


class StandInAttention(TunableFamily):
    """Host-side stand-in of the attention family (space, default, static smem gate) for synthetic replays."""

    name = "attention"

    def space(self, problem: Any) -> SearchSpace:
        """The stand-in space."""
        return standin_attention_space()

    def default_config(self, problem: Any) -> Config:
        """A FlashAttention-2-like default tile."""
        return {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 2, "SWIZZLE": True}

    def static_gates(self, config: Config, problem: Any) -> list[Rejection]:
        """Shared memory of the stand-in tile against 227 KB."""
        d = int(problem.get("head_dim", 64)) if isinstance(problem, Mapping) else 64
        smem = (config["BLOCK_M"] + 2 * config["BLOCK_N"] * config["NUM_STAGES"]) * d * 2
        if smem > 227 * 1024:
            return [Rejection("static.smem", f"{smem} B of shared memory > 227 KB")]
        return []

    def source_hash(self) -> str:
        """``synthetic``."""
        return "synthetic"


def synthetic_attention_replay(problem: Mapping[str, Any] | None = None, seed: int = 0,
                               use_real_space: bool = True) -> dict:
    """A synthetic replay dict for attention on ``problem`` (default: the seed workload)."""
    from tunelab.tuning.replay import synthesize_replay

    family: TunableFamily = StandInAttention()
    problem = dict(problem or SEED_PROBLEM)
    if use_real_space:
        try:
            from tunelab.tuning.family import get_family

            real = get_family("attention")
            problem = real.problem_from_dict(problem) if problem is not None else problem
            real.space(problem)
            family = real
        except Exception:  # noqa: BLE001 - not written yet, or needs something this machine lacks
            family, problem = StandInAttention(), dict(problem if isinstance(problem, Mapping) else SEED_PROBLEM)
    space = family.space(problem)
    latency = synthetic_latency(space, seed=seed, best_us=47.0)

    def outcome(config):
        # A sprinkle of compiled/numerics rejections so the gate table has something to show.
        u = _unit_hash(seed, "gate", config_key(dict(config)))
        return "compiled.spills" if u < 0.06 else ("numerics.error" if u < 0.08 else None)

    rng = np.random.default_rng(seed)
    base = {k: float(v * math.exp(rng.normal(0, 0.005))) for k, v in ANCHOR_BASELINES_US.items()}
    return synthesize_replay(family, problem, latency, outcome_code=outcome, baselines=base, seed=seed,
                             device_name="Synthetic H200 (not a measurement)",
                             notes="synthetic landscape for development; not a measurement")
