"""Ground truth: measure every config of a family's space for one problem and save it as a replay file.

The tuner-efficiency benchmark replays this file offline; ``tunelab tune --replay`` and the quickstart notebook
use it on machines without a GPU. Default: attention, the seed workload (fp16, B=16, H=16, S=512, D=64,
non-causal), written to ``benchmarks/data/attention_fp16_b16_h16_s512_d64.replay.json.gz`` (gzipped JSON).

Built to be fast (the whole valid space in a few minutes on an H200):

1. static gates on every config of the Cartesian product (free);
2. every remaining config compiled ahead, in parallel on the host (``--workers`` threads; NVRTC releases the
   GIL), with the compiled gates (registers, spills, occupancy) applied, while
3. the configs compiled so far are measured in the tuner's fault-isolated GPU worker: numerics gate, then a short timing
   (``--warmup`` + ``--samples`` launches, L2 flushed before each, CUDA graphs under 20 µs). A config that
   traps, crashes or hangs is recorded with its reason and the worker restarts;
4. the baselines (SDPA default/cuDNN/flash/efficient) and the default config measured ``--baseline-rounds``
   times, interleaved.

It prints its estimated duration first. ``--compile-only`` (no GPU needed, give ``--arch``) runs steps 1-2,
e.g. to warm the kernel cache on another machine. ``--max-seconds`` stops measuring in time and marks the
file partial (``complete: false``) rather than losing everything.
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

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"


def default_out(family: str, problem: dict) -> Path:
    """``benchmarks/data/attention_fp16_b16_h16_s512_d64[_sk1024][_causal].replay.json.gz`` for attention."""
    if family == "attention":
        def g(*keys):
            return next((problem[k] for k in keys if k in problem), "?")
        dtype = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(str(g("dtype")), str(g("dtype")))
        sq, sk = g("seq_q", "seq_len", "S"), g("seq_k", "seq_q", "seq_len", "S")
        name = (f"attention_{dtype}_b{g('batch', 'B')}_h{g('heads', 'H')}_s{sq}_d{g('head_dim', 'D')}"
                f"{'' if sk == sq else f'_sk{sk}'}{'_causal' if problem.get('causal') else ''}")
    else:
        name = family + "_" + "_".join(f"{k}{v}" for k, v in sorted(problem.items()))
    return DATA / f"{name}.replay.json.gz"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="attention")
    ap.add_argument("--shape", default="16,16,512,64", help="attention: B,H,S,D (default the seed workload)")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--samples", type=int, default=15, help="timed launches per config (default 15)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up launches per config (default 3)")
    ap.add_argument("--baseline-rounds", type=int, default=100, help="interleaved rounds of baselines (default 100)")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 4) - 2),
                    help="compile threads (default: cores - 2, leaving room for the measuring worker)")
    ap.add_argument("--arch", default=None, help="compile arch (default: the GPU's); needed with --compile-only")
    ap.add_argument("--measure-timeout", type=float, default=30.0, help="seconds before a hang is killed")
    ap.add_argument("--max-seconds", type=float, default=480.0, help="stop measuring after this (partial file)")
    ap.add_argument("--compile-only", action="store_true", help="static + compile + compiled gates, no GPU")
    ap.add_argument("--estimate-only", action="store_true", help="print the estimate and exit")
    ap.add_argument("--limit", type=int, default=None,
                    help="only a seeded random subset of this many configs (development; the file says so)")
    ap.add_argument("--fake", action="store_true",
                    help="toy family and fake backend, no GPU: exercises this script's logic (development)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    from tunelab.tuning.api import make_problem
    from tunelab.tuning.family import get_family
    from tunelab.tuning.family_backend import FamilyBackend
    from tunelab.tuning.gates import GateConfig, static_rejection
    from tunelab.tuning.replay import make_replay_dict, save_replay
    from tunelab.env import fingerprint

    if args.fake:
        from tunelab.tuning.fake import FakeBackend, ToyFamily

        fam, problem = ToyFamily(), {"M": 4096, "N": 4096, "dtype": "fp16"}
        backend = FakeBackend(n_samples=args.samples)
        backend.mode = "gpu"  # so that it is measured in the worker, as the real backend is
        backend.arch = "fake"
    else:
        fam = get_family(args.family)
        problem = make_problem(fam, [int(x) for x in args.shape.split(",")], args.dtype, causal=args.causal)
        backend = FamilyBackend(fam, problem, gates=GateConfig(), arch=args.arch, warmup=args.warmup,
                                samples=args.samples, cuda_graph="auto")
    pdict = fam.problem_dict(problem)
    out = args.out or default_out(fam.name, pdict)
    space = fam.space(problem)

    # 1. static gates
    entries: dict[str, dict] = {}
    todo = []
    for config in space.enumerate(valid_only=False):
        key = space.key(config)
        rej = static_rejection(fam, space, config, problem)
        if rej is None:
            todo.append(config)
        else:
            entries[key] = {"key": key, "config": config, "status": "rejected", "code": rej.code, "detail": rej.detail}
    if args.limit is not None and args.limit < len(todo):
        import random

        todo = random.Random(0).sample(todo, args.limit)
    print(f"{fam.name} {fam.problem_key(problem)}: {space.size()} configs, {len(todo)} pass the static gates"
          f"{' (subset)' if args.limit else ''}; arch {backend.arch}", flush=True)

    # estimate from one cold compile and a per-config measurement cost (worker round trip + numerics + timing)
    t0 = time.perf_counter()
    first = backend.prepare(todo[0])
    t_compile = max(first.compile_s, time.perf_counter() - t0)
    est_compile = t_compile * len(todo) / max(1, min(args.workers, len(todo)))
    # per config: worker round trip + cached module load + numerics (2 shapes) + warm-up and timed launches,
    # each after an L2 flush; refined from the real rate after the first 50 measurements
    est_measure = len(todo) * (0.006 + (args.warmup + args.samples) * 0.0003) + 15.0
    est_base = args.baseline_rounds * 5 * 0.002
    total = (est_compile if args.compile_only else max(est_compile, est_measure)) + est_base
    print(f"estimate: compile ~{est_compile:.0f} s ({t_compile:.2f} s per config cold, {args.workers} threads), "
          f"measure ~{est_measure:.0f} s (overlapped with compiling), baselines ~{est_base:.0f} s; "
          f"total ~{total:.0f} s" + (" (compile only)" if args.compile_only else ""), flush=True)
    if args.estimate_only:
        return 0

    # 2 + 3. compile ahead in parallel on the host while the worker measures what is already compiled
    from tunelab.tuning.backend import Arm
    from tunelab.tuning.worker import SubprocessEvaluator

    def record_prepared(config, p):
        key = space.key(config)
        e = {"key": key, "config": config, "resources": p.resources, "compile_s": round(p.compile_s, 4)}
        if not p.ok:
            e.update(status="rejected", code=p.rejection.code, detail=p.rejection.detail[:2000])
        entries[key] = e
        return p.ok

    complete = True
    t0 = time.perf_counter()
    n_measured = 0
    pool = cf.ThreadPoolExecutor(max_workers=args.workers)
    futures = {pool.submit(backend.prepare, c): c for c in todo[1:]}
    ready = [todo[0]] if record_prepared(todo[0], first) else []
    if args.compile_only:
        for i, fut in enumerate(cf.as_completed(futures), 1):
            record_prepared(futures[fut], fut.result())
            if i % max(1, len(futures) // 10) == 0:
                print(f"  compiled {i}/{len(futures)} ({time.perf_counter() - t0:.0f} s)", flush=True)
        pool.shutdown()
        from collections import Counter

        print(f"compiled {len(todo)} configs in {time.perf_counter() - t0:.1f} s")
        print(dict(Counter(e.get("code") or "ok" for e in entries.values())))
        return 0
    ev = SubprocessEvaluator(backend, timeout=args.measure_timeout)
    try:
        device = ev.start()
        print(f"measuring on {device.get('name')} ({device.get('uuid', '')}) while compiling", flush=True)
        pending = set(futures)
        compiled_n = 1
        t_first = time.perf_counter()
        while ready or pending:
            if not ready:  # wait for at least one compile to finish
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            else:
                done = {f for f in pending if f.done()}
                pending -= done
            for fut in done:
                compiled_n += 1
                if record_prepared(futures[fut], fut.result()):
                    ready.append(futures[fut])
            if not ready:
                continue
            if time.perf_counter() - t_start > args.max_seconds:
                complete = False
                print(f"--max-seconds reached after {n_measured} measurements: writing a partial file", flush=True)
                for f in pending:
                    f.cancel()
                break
            config = ready.pop(0)
            key = space.key(config)
            o = ev.measure(config)
            e = entries[key]
            e.update(status=o.status, code=o.code, detail=o.detail[:2000], measure_s=round(o.measure_s, 4),
                     sm_clock_mhz=o.sm_clock_mhz, errors=o.errors, extra=o.extra)
            if o.status == "ok":
                e["samples_us"] = [round(float(x), 3) for x in o.samples]  # 1 ns: far below timer resolution
            n_measured += 1
            if n_measured == 50:
                rate = (time.perf_counter() - t_first) / 50
                print(f"  measuring at {rate * 1e3:.1f} ms per config: ~{rate * len(todo):.0f} s for all "
                      f"(compiled {compiled_n}/{len(todo)} so far)", flush=True)
            if n_measured % max(1, len(todo) // 10) == 0:
                print(f"  measured {n_measured}, compiled {compiled_n}/{len(todo)} "
                      f"({time.perf_counter() - t0:.0f} s, {ev.restarts} worker restarts)", flush=True)
        pool.shutdown(wait=False, cancel_futures=True)
        # configs not reached before --max-seconds are dropped, never invented
        for key in [k for k, e in entries.items() if "status" not in e]:
            del entries[key]
        t_measure = time.perf_counter() - t0
        print(f"compiled and measured {n_measured} configs in {t_measure:.0f} s", flush=True)

        # 4. baselines and the default config, interleaved
        t0 = time.perf_counter()
        names = backend.baseline_names()
        arms = [Arm(n, "baseline", baseline=n) for n in names]
        default = fam.default_config(problem)
        arms.append(Arm("default", "config", config=default))
        conf = ev.confirm(arms, args.baseline_rounds, seed=0)
        t_base = time.perf_counter() - t0
    finally:
        ev.close()
    baselines = {n: conf.samples[n] for n in names if n in conf.samples}
    for label, why in conf.errors.items():
        print(f"  baseline {label} not measured: {why}")

    if args.fake:
        device = dict(device, synthetic=True)  # never mistaken for a measurement
    env = fingerprint()
    data = make_replay_dict(
        family=fam.name, problem=pdict, problem_key=fam.problem_key(problem), space=space, default_config=default,
        entries=list(entries.values()), baselines=baselines, device=device, env=env,
        source_hash=fam.source_hash() or "",
        timing={"warmup": args.warmup, "samples": args.samples, "flush_l2": True, "cuda_graph": "auto (<20 us)",
                "baseline_rounds": args.baseline_rounds},
        notes=f"benchmarks/ground_truth.py; compile+measure (overlapped) {t_measure:.1f} s, "
              f"baselines {t_base:.1f} s")
    data["complete"] = complete and args.limit is None
    data["subset"] = args.limit
    data["default_samples_us"] = conf.samples.get("default")
    save_replay(out, data)

    import numpy as np
    from collections import Counter

    ok = {k: float(np.median(e["samples_us"])) for k, e in entries.items() if e.get("status") == "ok"}
    counts = Counter(e.get("code") or "ok" for e in entries.values())
    best = min(ok, key=ok.get) if ok else None
    print(f"outcomes: {dict(counts)}")
    if best:
        print(f"best: {ok[best]:.2f} us  {best}")
    for n, s in baselines.items():
        print(f"baseline {n}: median {float(np.median(s)):.2f} us")
    print(f"written {out} ({'complete' if complete else 'PARTIAL'}) in {time.perf_counter() - t_start:.0f} s")
    copy_to_out(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
