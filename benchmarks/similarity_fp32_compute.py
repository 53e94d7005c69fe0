"""How fast the 3xTF32 main loop (fp32 search, Gram) consumes its operands when memory does not bound it.

On the H200, fp32 at N = 10M, nq = 1 reads the corpus at 3.8 TB/s (0.89x torch's GEMV), where fp16 reaches 4.65
(results/similarity.json at 3e59260, in git history): 29 GB/s per SM against 35. ncu of the fp32 nq = 1 search on an
H100 (``--ncu`` below; results/ncu_similarity_fp32_nq1_h100.txt, before the Veltkamp split) counted ~1,110 instructions
per warp and 64 KB pipeline stage, issued at 0.57 per cycle and scheduler: about 30 GB/s per SM at 1.98 GHz, so the
instructions bound it, and most of them split every fp32 element into its two tf32 halves. This script measures that
ceiling on any GPU:

  search   the nq = 1 default config of each dtype (fp32: on the 3xTF32 loop and 256-row tiles, which sm_90's
           default left for FFMA at 1a1c9ad and 128-row tiles at 02c659c; fp16) over an L2-resident corpus
           (``--n`` rows of d = 768:
           38 MB of fp32 at the default 12288) on ``--splits`` blocks (default 8: 6 tiles each, so the steady state
           dominates), back to back without an L2 flush; reported as corpus bytes per busy SM and second (since
           76449c4 the fp16 default at this N on sm_90 is the dense search, whose search kernel also writes the
           12288 keys; the results of f65bf36 and before ran the fused one)
  read     a kernel that only reads the same L2-resident bytes, on every SM
  gram     the complex64 Gram kernel (N = ``--gram-n`` states of dimension 256, the 3xTF32 main loop and nothing
           else: compute-bound), with the core's protocol, and its largest error against a complex128 reference

CUDA events around each launch, medians. ``--ncu`` instead launches the fp32 search 20 times (no timing) for
Nsight Compute:
  ncu --cache-control none --clock-control none --set full -k regex:similarity_topk --launch-skip 10
      --launch-count 1 python3 benchmarks/similarity_fp32_compute.py --ncu
Results: benchmarks/results/similarity_fp32_compute[_TAG].json (environment fingerprint inside); a table last.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, current_stream, draw_search_inputs, summarize, warm_up_gpu,  # noqa: E402
                     write_result)

NQ, D, K = 1, 768, 10


def check_l2_resident(nbytes: int, props, what: str) -> None:
    """Exit naming ``what`` (the option that sets the corpus) when ``nbytes`` of corpus would not stay in L2."""
    if nbytes > props.L2_cache_size * 0.8:
        raise SystemExit(f"{what}: the corpus takes {nbytes / 1e6:.0f} MB, more than 80% of the "
                         f"{props.L2_cache_size / 1e6:.0f} MB L2; pass a smaller size")


def l2_resident_rate(fn, nbytes: int, busy: int, samples: int) -> dict:
    """``fn`` (a launch over an L2-resident corpus of ``nbytes``) timed back to back without an L2 flush: its µs and
    the corpus bytes each of its ``busy`` SMs consumes per second."""
    from tunelab.timing import time_callable

    t = summarize(time_callable(fn, warmup=20, samples=samples, flush_l2=False))
    return {"us": t, "corpus_bytes": nbytes, "busy_sms": busy, "GBps_per_busy_sm": nbytes / busy / t["median"] / 1e3}


def main() -> int:
    import torch

    from similarity_dense import Prepared
    from tunelab.ops import similarity as sim
    from tunelab.timing import time_callable

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12288, help="corpus rows (fp32 at d = 768: 3 KB each; keep it in L2)")
    ap.add_argument("--splits", type=int, default=8, help="search blocks (each streams N / splits rows)")
    ap.add_argument("--gram-n", type=int, default=8192, help="Gram states (complex64, dimension 256); 0: skip")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--tag", default=None, help="appended to the results file's name")
    ap.add_argument("--ncu", action="store_true", help="launch the fp32 search 20 times for ncu, no timing")
    args = ap.parse_args()

    clock = warm_up_gpu()
    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)
    stream = current_stream()
    reader = corpus_reader()
    rows = {}
    for dtype in ("float32", "float16"):
        q, c = draw_search_inputs(NQ, args.n, D, getattr(torch, dtype), seed=1)
        nbytes = c.numel() * c.element_size()
        check_l2_resident(nbytes, props, f"--n {args.n} ({dtype})")
        cfg = sim.default_config(NQ, K, dtype, D, n=args.n)
        if dtype == "float32":  # the 3xTF32 loop on 256-row tiles (sm_90's default is FFMA on 128 rows here)
            cfg = dict(cfg, MMA=0, BLOCK_N=256)
        prep = Prepared(cfg, q, c, splits=args.splits)
        cfg, plan, search = prep.config, prep.plan, prep.search
        if args.ncu:
            if dtype == "float32":
                for _ in range(20):
                    search(stream)
                torch.cuda.synchronize()
                print(f"launched the fp32 search 20 times: config {cfg}, grid {plan['q_tiles']}x{plan['splits']}")
            continue
        read = reader(c)
        blocks = plan["q_tiles"] * plan["splits"]
        for name, fn, busy in ((f"{dtype} search", search, blocks),
                               (f"{dtype} read", read, props.multi_processor_count)):
            rows[name] = dict(l2_resident_rate(fn, nbytes, busy, args.samples), config=cfg if "search" in name else None)
            print(f"{name:<16} {rows[name]['us']['median']:8.2f} us  {rows[name]['GBps_per_busy_sm']:6.1f} GB/s per busy SM "
                  f"({busy} SMs)", flush=True)
    if args.ncu:
        return 0
    if args.gram_n:
        g = torch.Generator(device="cuda").manual_seed(args.gram_n)
        x = torch.randn((args.gram_n, 256), generator=g, device="cuda", dtype=torch.complex64)
        out = torch.empty((args.gram_n, args.gram_n), device="cuda")
        run = lambda: sim.gram(x, mirror=True, out=out)  # noqa: E731
        run()
        ref_rows = torch.arange(0, args.gram_n, max(1, args.gram_n // 64), device="cuda")
        xd = x.to(torch.complex128)
        err = float((out[ref_rows].double() - (xd[ref_rows].conj() @ xd.T).abs() ** 2).abs().max())
        t = summarize(time_callable(run, warmup=5, samples=max(20, args.samples // 4)))
        rows["complex64 gram"] = {"us": t, "n": args.gram_n, "dim": 256, "max_abs_err": err,
                                  "tflops_equiv": 8.0 * args.gram_n ** 2 * 256 / (t["median"] * 1e-6) / 1e12}
        print(f"{'complex64 gram':<16} {t['median']:8.1f} us  {rows['complex64 gram']['tflops_equiv']:6.1f} TFLOP/s "
              f"equivalent, max error {err:.3g} (n = {args.gram_n})", flush=True)
    path = write_result("similarity_fp32_compute",
                        {"nq": NQ, "n": args.n, "d": D, "k": K, "splits": args.splits, "sm_mhz_after_warmup": clock,
                         "timer": "events, no L2 flush (the corpus stays in L2)", "rows": rows}, args.tag)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
