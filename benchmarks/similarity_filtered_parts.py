"""Where the filtered search's time goes at one shape: the dense search's two kernels alone (L2 flushed before each)
and each pair (search then select). The filtered search is not timed alone: run again without its select it would
start from the last run's bars and counts, fill its candidate rows and stop storing, so it would time less work
than a call does (the first results file, at fe781ec, has such a figure: 47.8 us; the block timelines of
similarity_probe.py --variants filtered --trace are the way to see its parts). ``--once`` runs the filtered pair
once (for ncu). Results: benchmarks/results/similarity_filtered_parts<tag>.json.

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
        out[name] = {"pair_us": summarize(time_callable(prep, warmup=3, samples=60))}
        if name == "dense":
            out[name]["search_alone_us"] = summarize(time_callable(prep.search, warmup=3, samples=60))
            out[name]["select_alone_us"] = summarize(time_callable(prep.merge, warmup=3, samples=60))
    torch.cuda.synchronize()
    assert int(sim.filter_state(q.device, args.nq).count_nonzero()) == 0, "the filtered pairs left a state set"
    path = write_result(f"similarity_filtered_parts{args.tag}", {"nq": args.nq, "n": args.n, "d": D, "k": K,
                                                                  "sm_mhz_after_warmup": clock, "arms": out})
    print(f"wrote {path}")
    for name, v in out.items():
        print(f"{name:>9}: pair {v['pair_us']['median']:.1f} us"
              + (f", search alone {v['search_alone_us']['median']:.1f} us, select alone "
                 f"{v['select_alone_us']['median']:.1f} us" if "select_alone_us" in v else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
