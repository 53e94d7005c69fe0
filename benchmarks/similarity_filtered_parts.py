"""Where the filtered search's time goes at one shape: the dense and the filtered search's two kernels alone (L2
flushed before each) and each pair (search then select). (The first results file, at fe781ec, whose filtered search
kept bars and counts in global memory from one call to the next, has no filtered kernels alone: its search run
without its select did less work than a call.) ``--once`` runs the filtered pair once (for ncu). Results:
benchmarks/results/similarity_filtered_parts<tag>.json.

    python3 benchmarks/similarity_filtered_parts.py [--nq 100] [--n 50000] [--tag _h100] [--once]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, summarize, warm_up_gpu, write_result  # noqa: E402
from similarity_dense import K, Prepared  # noqa: E402

D = 768


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nq", type=int, default=100)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--tag", default="")
    ap.add_argument("--once", action="store_true", help="run the filtered pair once and exit (for ncu)")
    args = ap.parse_args()
    import torch

    from tunelab.ops import similarity as sim
    from tunelab.timing import time_callable
    from tunelab.tuning.family import next_pow2

    q, c = draw_search_inputs(args.nq, args.n, D, torch.float16, seed=args.n + args.nq)
    dense_cfg = dict(sim.default_config(args.nq, K, "float16", D, n=min(next_pow2(args.n), sim.DENSE_MAX_N)),
                     MERGE=sim.MERGE_DENSE)
    dense, filt = Prepared(dense_cfg, q, c), Prepared(dict(dense_cfg, MERGE=sim.MERGE_FILTERED), q, c)
    if args.once:
        filt()
        torch.cuda.synchronize()
        return 0
    clock = warm_up_gpu()
    out = {}
    for name, prep in (("dense", dense), ("filtered", filt)):
        prep()
        out[name] = {"pair_us": summarize(time_callable(prep, warmup=3, samples=60)),
                     "search_alone_us": summarize(time_callable(prep.search, warmup=3, samples=60)),
                     "select_alone_us": summarize(time_callable(prep.merge, warmup=3, samples=60))}
    torch.cuda.synchronize()
    path = write_result(f"similarity_filtered_parts{args.tag}", {"nq": args.nq, "n": args.n, "d": D, "k": K,
                                                                  "sm_mhz_after_warmup": clock, "arms": out})
    print(f"wrote {path}")
    for name, v in out.items():
        print(f"{name:>9}: pair {v['pair_us']['median']:.1f} us"
              + f", search alone {v['search_alone_us']['median']:.1f} us, select alone "
                f"{v['select_alone_us']['median']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
