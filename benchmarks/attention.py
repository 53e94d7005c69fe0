"""Attention forward on the GPU: our portable mma.sync kernel against every SDPA backend (issue 3's benchmark).

Shapes:
  * seed workload: fp16, B=16 H=16 S=512 D=64, non-causal and causal;
  * standard grid: B*S = 16k tokens, H*D = 2048, S in 512..16k, D in {64, 128}, causal and not, fp16 and bf16;
  * small shapes: fp16, B=4 H=8 D=64, S in {128, 256, 512}.

Arms per shape: our documented default config, the best config of a quick sweep (a handful of hand-picked
configs, each timed briefly, plus the default), and SDPA default / cuDNN / flash / efficient (each forced with
``sdpa_kernel``; a backend that cannot serve the shape is reported as skipped). The final measurement interleaves
the arms round by round (A B C ... A B C ...) with the core's timer protocol (L2 flush, CUDA events; CUDA-graph
replay when the fastest arm is under 20 µs), and reports the median with a 95% BCa bootstrap CI in µs and in
TFLOP/s (4*B*H*S*S*D, halved for causal). Each shape also gets its floor: FLOPs / 650 TFLOP/s (measured fp16
dense matmul rate of this H200) and bytes / 4.25 TB/s (q, k, v read once, o written once); the floor is the
larger of the two. Our outputs are checked against SDPA before timing.

Writes benchmarks/results/attention_h200.json (with the environment fingerprint) and prints a table last.
Runs in about 5 minutes on an H200. ``--quick`` runs the seed workload and two grid shapes only.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PEAK_FLOPS = 650e12   # fp16 dense matmul measured through torch on this H200 (ANCHORS.md)
PEAK_BYTES = 4.25e12  # device-to-device copy, read + write (ANCHORS.md)
GRAPH_BELOW_US = 20.0


def _cfg(bm, bn, warps, stages, q_regs, kv_split=1, swizzle=1, vec=16, unroll=0):
    return dict(BLOCK_M=bm, BLOCK_N=bn, NUM_WARPS=warps, STAGES=stages, SWIZZLE=swizzle, VEC_LOAD=vec,
                Q_IN_REGS=q_regs, UNROLL=unroll, KV_SPLIT_WARPS=kv_split)


# The quick sweep: tile shapes around FlashAttention-2's choices. Configs that spill on this arch are dropped.
SWEEP = {
    64: [_cfg(128, 128, 4, 2, 0), _cfg(128, 64, 4, 3, 1), _cfg(64, 64, 4, 2, 1), _cfg(128, 64, 8, 2, 1),
         _cfg(128, 128, 8, 2, 1), _cfg(64, 128, 4, 2, 1), _cfg(128, 32, 4, 2, 1), _cfg(64, 64, 4, 2, 1, kv_split=2)],
    128: [_cfg(128, 32, 4, 2, 0), _cfg(128, 64, 4, 3, 0), _cfg(128, 64, 8, 2, 1), _cfg(64, 64, 4, 2, 1),
          _cfg(128, 128, 8, 2, 0), _cfg(128, 64, 8, 3, 1), _cfg(64, 128, 4, 2, 0), _cfg(128, 32, 4, 3, 0)],
}


def shapes(quick: bool):
    out = [dict(name="seed", dtype="float16", B=16, H=16, S=512, D=64, causal=c) for c in (False, True)]
    grid = []
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for causal in (False, True):
                for s in (512, 1024, 2048, 4096, 8192, 16384):
                    grid.append(dict(name="grid", dtype=dtype, B=16384 // s, H=2048 // d, S=s, D=d, causal=causal))
    small = [dict(name="small", dtype="float16", B=4, H=8, S=s, D=64, causal=False) for s in (512, 256, 128)]
    if quick:
        grid = [g for g in grid if g["dtype"] == "float16" and not g["causal"] and g["S"] in (2048, 4096)
                and g["D"] == 128]
        small = small[:1]
    return out + grid + small


def flops(sh) -> float:
    f = 4.0 * sh["B"] * sh["H"] * sh["S"] * sh["S"] * sh["D"]
    return f / 2 if sh["causal"] else f


def floor_us(sh) -> dict:
    nbytes = 2.0 * sh["B"] * sh["H"] * sh["S"] * sh["D"] * 4
    compute = flops(sh) / PEAK_FLOPS * 1e6
    memory = nbytes / PEAK_BYTES * 1e6
    return {"compute_us": compute, "memory_us": memory, "floor_us": max(compute, memory),
            "bound": "compute" if compute >= memory else "memory"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="seed workload + 2 grid shapes + 1 small shape")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds of the final measurement")
    ap.add_argument("--sweep-samples", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    import numpy as np
    import torch

    import tunelab
    import tunelab.ops.attention as ops
    from tunelab import baselines
    from tunelab.stats import median_ci
    from tunelab.timing import time_callable
    from tunelab.tuning.families import attention as fam

    if not torch.cuda.is_available():
        print("benchmarks/attention.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from _common import warm_up_gpu
    arch = tunelab.current_arch()
    todo = shapes(args.quick)

    # ---- compile every (config, D, dtype, causal) once, in parallel (NVRTC releases the GIL)
    jobs = set()
    for sh in todo:
        cfgs = [ops.default_config(sh["D"], sh["dtype"], sh["causal"], arch=arch)] + SWEEP[sh["D"]]
        for c in cfgs:
            jobs.add((ops.config_string(c), sh["D"], sh["dtype"], sh["causal"]))

    def build(job):
        cs, d, dtype, causal = job
        try:
            ca = ops.compile_config(ops.parse_config_string(cs), head_dim=d, dtype=dtype, causal=causal, arch=arch)
        except tunelab.TunelabError as exc:
            return job, None, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        r = ca.resources
        if r.spill_store_bytes or r.spill_load_bytes:
            return job, None, f"spills {r.spill_store_bytes + r.spill_load_bytes} B"
        if ca.smem_bytes > fam.smem_limit(arch):
            return job, None, "shared memory above this GPU's limit"
        return job, ca, None

    t0 = time.perf_counter()
    compiled, dropped = {}, {}
    with cf.ThreadPoolExecutor(16) as ex:
        for job, ca, why in ex.map(build, sorted(jobs)):
            if ca is None:
                dropped[job] = why
            else:
                compiled[job] = ca
    compile_s = time.perf_counter() - t0
    print(f"compiled {len(compiled)} instances in {compile_s:.1f} s ({len(dropped)} dropped)", flush=True)
    for job, why in sorted(dropped.items()):
        print(f"  dropped {job}: {why}", flush=True)

    print(f"GPU warmed up: SM clock {warm_up_gpu():.0f} MHz", flush=True)
    results = []
    for sh in todo:
        t_shape = time.perf_counter()
        dtype = getattr(torch, sh["dtype"])
        B, H, S, D, causal = sh["B"], sh["H"], sh["S"], sh["D"], sh["causal"]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, S, D, generator=g, device="cuda", dtype=torch.float32).to(dtype)
                   for _ in range(3))
        scale = 1.0 / math.sqrt(D)
        out = torch.empty_like(q)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        tol = 2e-2 if sh["dtype"] == "bfloat16" else 4e-3
        default_cfg = ops.default_config(D, sh["dtype"], causal, arch=arch)
        default_key = (ops.config_string(default_cfg), D, sh["dtype"], causal)

        def ours(cs):
            ca = compiled.get((cs, D, sh["dtype"], causal))
            if ca is None:
                return None
            out.fill_(float("nan"))
            ca.launch(q, k, v, out, None, 0, scale)
            torch.cuda.synchronize()
            err = float((out.float() - ref.float()).abs().max())
            if not err <= tol:  # also catches NaN
                raise RuntimeError(f"config {cs} is wrong on {sh}: max abs error {err:.3g} vs SDPA")
            return ca.prepare(q, k, v, out, None, 0, scale)

        # quick sweep: a few samples per candidate, pick the best median
        sweep = []
        candidates = [default_key[0]] + [ops.config_string(c) for c in SWEEP[D]]
        for cs in dict.fromkeys(candidates):
            prep = ours(cs)
            if prep is None:
                sweep.append({"config": cs, "skipped": dropped.get((cs, D, sh["dtype"], causal), "not compiled")})
                continue
            med = float(np.median(time_callable(prep, warmup=3, samples=args.sweep_samples)))
            sweep.append({"config": cs, "median_us": med})
        timed = [s for s in sweep if "median_us" in s]
        best = min(timed, key=lambda s: s["median_us"])

        arms = {"ours_default": ours(default_key[0]), "ours_best": ours(best["config"])}
        base, skipped = baselines.attention(q, k, v, causal=causal, scale=None)
        arms.update(base)
        # an arm that could not be built (our default dropped by a gate, a backend that refused) is reported
        # in `skipped` with its reason instead of being timed
        for name in [n for n, fn in arms.items() if fn is None]:
            del arms[name]
            skipped = dict(skipped or {}, **{name: dropped.get(default_key, "not available")})
        # one timer mode for all arms: CUDA graphs when the fastest arm is a few microseconds
        quick_med = {name: float(np.median(time_callable(fn, warmup=2, samples=3))) for name, fn in arms.items()}
        graph = min(quick_med.values()) < GRAPH_BELOW_US
        samples = {name: [] for name in arms}
        for name, fn in arms.items():
            time_callable(fn, warmup=3, samples=1, cuda_graph=graph)
        for _ in range(args.rounds):
            for name, fn in arms.items():
                samples[name].append(float(time_callable(fn, warmup=0, samples=1, cuda_graph=graph)[0]))
        f = flops(sh)
        row = dict(sh, flops=f, **floor_us(sh), timer="cuda_graph" if graph else "events", rounds=args.rounds,
                   default_config=default_key[0], best_config=best["config"], sweep=sweep, skipped=skipped, arms={})
        for name, xs in samples.items():
            ci = median_ci(xs, seed=0)
            row["arms"][name] = {
                "median_us": ci.estimate, "ci95_us": [ci.low, ci.high], "ci_method": ci.method,
                "tflops": f / ci.estimate / 1e6, "tflops_ci95": [f / ci.high / 1e6, f / ci.low / 1e6],
                "samples_us": xs,
            }
        results.append(row)
        print(f"{_label(sh):42s} best {row['arms']['ours_best']['tflops']:6.1f} TF/s  "
              f"({time.perf_counter() - t_shape:.1f} s)", flush=True)

    total = time.perf_counter() - t_start
    payload = {"shapes": results, "compile_s": compile_s, "wall_s": total, "arch": arch,
               "peaks": {"flops": PEAK_FLOPS, "bytes_per_s": PEAK_BYTES},
               "dropped_configs": {"|".join(map(str, k)): v for k, v in dropped.items()},
               "protocol": "median of interleaved rounds, L2 flushed before every sample, BCa 95% CI of the median"}
    from _common import RESULTS, write_result

    name = "attention_h200" if args.out is None else args.out.stem
    path = write_result(name, payload)
    if args.out is not None and args.out.resolve() != (RESULTS / f"{name}.json").resolve():
        args.out.write_text(path.read_text())
    _print_table(results)
    print(f"\nwrote {path} in {total:.0f} s")
    return 0


def _label(sh) -> str:
    dt = "bf16" if sh["dtype"] == "bfloat16" else "fp16"
    return f"{sh['name']:5s} {dt} B{sh['B']} H{sh['H']} S{sh['S']} D{sh['D']}{' causal' if sh['causal'] else ''}"


def _print_table(results) -> None:
    cols = ["ours_default", "ours_best", "sdpa_default", "sdpa_cudnn", "sdpa_flash", "sdpa_efficient"]
    heads = ["default", "best", "sdpa", "cudnn", "flash", "effic."]
    print("\nTFLOP/s (median, 95% CI in the JSON); floor = max(FLOPs/650T, bytes/4.25T)")
    print(f"{'shape':42s} {'floor us':>9s} " + " ".join(f"{h:>8s}" for h in heads) + f" {'best/flash':>10s}"
          + f" {'best/cudnn':>10s}")
    for r in results:
        cells = []
        for c in cols:
            a = r["arms"].get(c)
            cells.append(f"{a['tflops']:8.1f}" if a else f"{'-':>8s}")
        best = r["arms"]["ours_best"]["median_us"]
        ratio = lambda b: f"{r['arms'][b]['median_us'] / best:10.2f}" if b in r["arms"] else f"{'-':>10s}"  # noqa: E731
        print(f"{_label(r):42s} {r['floor_us']:9.1f} " + " ".join(cells) + " " + ratio("sdpa_flash") + " "
              + ratio("sdpa_cudnn"))


if __name__ == "__main__":
    raise SystemExit(main())
