"""Tuner efficiency on a brute-forced space, replayed offline (CPU only).

For each strategy (LHS+GP as ``tunelab tune`` runs it by default on an enumerable space: the family's default
config, then 20 Latin-hypercube seeds, then the Gaussian-process sampler of ``tunelab.tuning.surrogate``; the same
without the default-config seed (``lhs+gp-nodefault``, what that seed is worth); LHS+TPE (default-config seed,
LHS, TPE with the local search of ``tunelab.tuning.local_search``), the previous default; LHS+TPE without the
local search; and, unseeded, TPE alone, random, grid and CMA-ES) and
each of 20 seeds, run the real tuner
(``tunelab.tune`` with ``replay=``: same driver, gates, duplicate handling and compile-ahead window as a GPU
run) and record the number of *evaluations* (distinct configs that passed the static gates and were compiled,
i.e. what costs time; the unit of ``--trials``) until the best measured median is within 5% and within 2% of
the recorded optimum. Report medians over seeds with bootstrap 95% CIs, and random search's exact expected
count (N + 1) / (K + 1), where N is the number of statically valid configs (what random draws from, never
repeating) and K the number of them within X% of the optimum.

Usage::

    python benchmarks/tuner_efficiency.py                      # the H200 ground truth in benchmarks/data/
    python benchmarks/tuner_efficiency.py --replay FILE
    python benchmarks/tuner_efficiency.py --synthetic --out /tmp/eff.json   # development only

Only a real ground-truth file counts for the result; results from a synthetic replay are never written to
``benchmarks/results/`` unless ``--out`` says so.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import copy_to_out  # noqa: E402

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPLAY = ROOT / "benchmarks" / "data" / "attention_fp16_b16_h16_s512_d64.replay.json.gz"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "tuner_efficiency.json"

DEFAULT_STRATEGY = "lhs+gp"
STRATEGIES = {
    "lhs+gp": {"sampler": "auto", "seed_trials": 20},
    "lhs+gp-nodefault": {"sampler": "auto", "seed_trials": 20, "seed_default": False},
    "lhs+tpe": {"sampler": "tpe", "seed_trials": 20},
    "lhs+tpe-nolocal": {"sampler": "tpe", "seed_trials": 20, "local_every": 0},
    "tpe": {"sampler": "tpe", "seed_trials": 0, "local_every": 0, "seed_default": False},
    "random": {"sampler": "random", "seed_trials": 0, "seed_default": False},
    "grid": {"sampler": "grid", "seed_trials": 0, "seed_default": False},
    "cmaes": {"sampler": "cmaes", "seed_trials": 0, "seed_default": False},
}
THRESHOLDS = (0.05, 0.02)


_REPLAY_CACHE: dict = {}


def _replay(source):
    """The replay data (a path is loaded once per process: worker processes get the path, not 10 MB of data)."""
    if not isinstance(source, (str, Path)):
        return source
    if source not in _REPLAY_CACHE:
        from tunelab.tuning.replay import load_replay

        _REPLAY_CACHE[source] = load_replay(source)
    return _REPLAY_CACHE[source]


def run_one(replay, strategy: str, seed: int, optimum: float, cap: int, lookahead: int) -> dict:
    """One tuning run; returns evaluations to reach each threshold (None if never within ``cap``)."""
    from tunelab.tuning.api import tune

    replay = _replay(replay)
    reached: dict[float, int | None] = {x: None for x in THRESHOLDS}

    def on_trial(info):
        best = info["best"]
        if best is None:
            return
        for x in THRESHOLDS:
            if reached[x] is None and best <= optimum * (1 + x) + 1e-12:
                reached[x] = info["evaluated"]

    t0 = time.perf_counter()
    r = tune(replay.family, replay=replay, trials=cap, seed=seed, storage="memory", progress=False,
             confirm=False, save_results_file=False, on_trial=on_trial, lookahead=lookahead, compile_workers=1,
             stop_at=optimum * (1 + min(THRESHOLDS)), **STRATEGIES[strategy])
    return {"seed": seed, "evals_to": {f"{int(x * 100)}%": reached[x] for x in THRESHOLDS},
            "evaluations": r.data["evaluations"], "stop_reason": r.data["stop_reason"],
            "seconds": round(time.perf_counter() - t0, 2)}


def fmt(e: dict) -> str:
    """``median [lo, hi]`` with ``>=`` for a censored median and the count of runs that never got there."""
    ge = ">=" if e["median_is_lower_bound"] else ""
    miss = f" ({e['not_reached']} not reached)" if e["not_reached"] else ""
    return f"median {ge}{e['median']:.1f} [{e['ci95'][0]:.1f}, {e['ci95'][1]:.1f}]{miss}"


def summarize(values: list[int | None], cap: int, seed: int) -> dict:
    """Median with a BCa 95% CI over seeds; runs that never got there count as ``cap`` (and are listed)."""
    from tunelab import stats

    censored = sum(v is None for v in values)
    x = [cap if v is None else v for v in values]
    ci = stats.median_ci(x, n_resamples=4999, seed=seed)
    # Runs that never got there are counted as the cap: the median (and the CI's upper end) is then only a
    # lower bound once they are numerous enough to reach the middle (or the top) of the sorted values.
    return {"median": ci.estimate, "ci95": [ci.low, ci.high], "ci_method": ci.method, "mean": float(np.mean(x)),
            "values": values, "not_reached": censored, "median_is_lower_bound": censored >= len(values) / 2,
            "ci_high_is_lower_bound": censored > 0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replay", type=Path, default=DEFAULT_REPLAY, help="ground-truth replay file")
    ap.add_argument("--synthetic", action="store_true", help="use a synthetic attention replay (development)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated subset")
    ap.add_argument("--lookahead", type=int, default=9,
                    help="candidates in flight, as in a GPU run with 8 compile threads (default 9)")
    ap.add_argument("--cap", type=int, default=200,
                    help="max evaluations per run (default 200, five times the goal; runs that do not get there are "
                         "reported as not reached)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel runs (default: cores)")
    ap.add_argument("--out", type=Path, default=None, help=f"output JSON (default {DEFAULT_OUT} for real data)")
    args = ap.parse_args(argv)

    from tunelab import stats
    import tunelab.tuning.api  # noqa: F401 - import cost outside the timings
    from tunelab.tuning.gates import static_rejection
    from tunelab.tuning.replay import ReplayData, ReplayFamily, load_replay
    from tunelab.env import fingerprint

    synthetic_in_memory = args.synthetic
    if args.synthetic:
        from tunelab.tuning.synthetic import synthetic_attention_replay

        replay = ReplayData(synthetic_attention_replay(), "synthetic")
    else:
        if not args.replay.is_file():
            print(f"no ground truth at {args.replay}; record it on the GPU with benchmarks/ground_truth.py, or use "
                  "--synthetic for development", file=sys.stderr)
            return 2
        replay = load_replay(args.replay)
    synthetic = bool(replay.device.get("synthetic"))
    if replay.raw.get("complete") is False or replay.raw.get("subset"):
        print("WARNING: this ground truth is partial (not every valid config was measured); the optimum and the "
              "counts below are those of the recorded subset only", file=sys.stderr)
    out = args.out or (None if synthetic else DEFAULT_OUT)

    fam = ReplayFamily(replay)
    space = fam.space(replay.problem)
    valid = [c for c in space.enumerate() if static_rejection(fam, space, c, replay.problem) is None]
    measured = replay.measured()
    _, optimum = replay.optimum()
    n_valid = len(valid)
    cap = min(args.cap, n_valid) if args.cap else n_valid
    exact = {}
    for x in THRESHOLDS:
        k = sum(v <= optimum * (1 + x) + 1e-12 for v in measured.values())
        exact[f"{int(x * 100)}%"] = {"K": k, "N": n_valid,
                                     "expected_evaluations": stats.expected_random_draws(n_valid, k)}
    print(f"replay: {replay.path} ({'SYNTHETIC' if synthetic else replay.device.get('name')}); "
          f"{len(replay.entries)} configs, {n_valid} statically valid, {len(measured)} measured; "
          f"optimum {optimum:.2f} us")
    for key, e in exact.items():
        print(f"  within {key}: K={e['K']}; random search expects {e['expected_evaluations']:.1f} evaluations")

    results = {}
    t_all = time.perf_counter()
    for name in [s.strip() for s in args.strategies.split(",") if s.strip()]:
        if name not in STRATEGIES:
            print(f"unknown strategy {name!r}; accepted: {list(STRATEGIES)}", file=sys.stderr)
            return 2
        t_strategy = time.perf_counter()
        if args.jobs > 1 and not synthetic_in_memory:
            # one process per run: TPE is single-threaded Python, and runs are independent
            import multiprocessing as mp

            with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
                runs = list(ex.map(run_one, [str(args.replay)] * args.seeds, [name] * args.seeds,
                                   range(args.seeds), [optimum] * args.seeds, [cap] * args.seeds,
                                   [args.lookahead] * args.seeds))
        else:
            runs = [run_one(replay, name, seed, optimum, cap, args.lookahead) for seed in range(args.seeds)]
        entry = {"runs": runs}
        for x in THRESHOLDS:
            key = f"{int(x * 100)}%"
            entry[key] = summarize([r["evals_to"][key] for r in runs], cap, seed=sum(map(ord, name)))
        results[name] = entry
        print(f"{name:8s} to 5%: {fmt(entry['5%'])}   to 2%: {fmt(entry['2%'])}   "
              f"({time.perf_counter() - t_strategy:.0f} s)", flush=True)

    goal = results.get(DEFAULT_STRATEGY, {}).get("5%", {}).get("median")
    doc = {
        "benchmark": "tuner_efficiency", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "replay": {"path": str(replay.path), "digest": replay.digest(), "device": replay.device,
                   "problem": replay.problem, "synthetic": synthetic, "recorded_env": replay.raw.get("env", {}),
                   "complete": replay.raw.get("complete", True) and not replay.raw.get("subset")},
        "env": fingerprint(), "unit": "evaluations (distinct configs past the static gates)",
        "seeds": args.seeds, "lookahead": args.lookahead, "cap": cap, "jobs": args.jobs, "optimum_us": optimum,
        "n_configs": len(replay.entries), "n_static_valid": n_valid, "n_measured": len(measured),
        "random_exact": exact, "strategies": results,
        "goal": {f"{DEFAULT_STRATEGY} (the default) median evaluations to within 5%": goal, "target": 40,
                 "met": None if goal is None else bool(goal <= 40)},
        "wall_s": round(time.perf_counter() - t_all, 1),
    }
    if out is None:
        print("synthetic replay: results not written (pass --out to keep them for development)")
    else:
        from tunelab.jsonfile import write_json

        write_json(out, doc)
        copy_to_out(out)
        print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
