"""A/B of the select kernel (kernels/similarity/select.cuh) against another version of it, in one process on one GPU.

after   the working tree's kernels
before  the headers in ``--before``: select.cuh, and any other kernel header the change touched. E.g. 027b2c8's
        select.cuh (warp 0 merges the warps' sorted maxima, one head a round for k rounds, to the exact k-th
        largest of the 1024 threads' maxima; each thread whose maximum reaches the bar walks its entries again
        alone) or 48cf1bf's (the bar from the warps' maxima and k-th maxima, one sort in warp 0; the owners still
        walk alone); the block maxima' A/B (results/similarity_select_bound_h100_block_maxima.json, --rounds 4
        --budget-s 1.0) swapped 6d1f4ef's topk.cuh, params.cuh and select.cuh

For each shape (fp16, d = 768, k = 10, inner product; the dense search, MERGE=5, on the default config of the
store bucket of 65536 rows) both versions are compiled (benchmarks/_common.kernel_variant swaps the header in a
copy of the kernel tree) and timed interleaved with the core's protocol (similarity_dense.time_all): the search +
select pair (L2 flushed before each) and the select alone over the key matrix the search left in L2 (no flush, as
the op's stream has it); their scores and indices must be equal. Results:
benchmarks/results/similarity_select_bound[_TAG].json; a table last.

    mkdir -p ab_before/similarity
    git show 027b2c8:csrc/kernels/similarity/select.cuh > ab_before/similarity/select.cuh
    python3 benchmarks/similarity_select_bound.py --before ab_before [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (draw_search_inputs, headers_dir, kernel_variant, speedup, summarize, warm_up_gpu,  # noqa: E402
                     write_result)

D, K = 768, 10
SHAPES = [(1, 50_000), (8, 50_000), (32, 50_000), (100, 50_000), (1, 100_000)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=headers_dir("similarity/select.cuh"), required=True,
                    help="directory laid out as csrc/kernels with the before similarity/select.cuh")
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    ap.add_argument("--budget-s", type=float, default=1.5, help="seconds of samples per shape (time_all)")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    import torch

    from similarity_dense import Prepared, time_all
    from tunelab.ops import similarity as sim

    clock = warm_up_gpu()
    rows = []
    for nq, n in SHAPES:
        q, c = draw_search_inputs(nq, n, D, torch.float16, seed=n + nq)
        cfg = dict(sim.default_config(nq, K, "float16", D, n=65536), MERGE=sim.MERGE_DENSE)
        preps = {"after": Prepared(cfg, q, c)}
        with kernel_variant(headers=args.before):
            preps["before"] = Prepared(cfg, q, c)
        for p in preps.values():
            p()
        torch.cuda.synchronize()
        equal = bool(torch.equal(preps["after"].indices, preps["before"].indices)
                     and torch.equal(preps["after"].scores, preps["before"].scores))
        fns = {}
        for side, p in preps.items():
            fns[f"{side}/pair"], fns[f"{side}/select"] = p, p.merge
        samples, _ = time_all(fns, budget_s=args.budget_s, rounds=args.rounds, graph_below_us=0,
                              unflushed=frozenset(k for k in fns if k.endswith("/select")))
        row = {"nq": nq, "n": n, "config": preps["after"].config, "splits": preps["after"].plan["splits"],
               "results_equal": equal, "us": {k: summarize(v) for k, v in samples.items()}}
        for part in ("pair", "select"):
            row[f"{part}_speedup"] = speedup(samples[f"before/{part}"], samples[f"after/{part}"])
        rows.append(row)
        print(f"nq={nq:>4} N={n:>7}: pair {row['us']['after/pair']['median']:6.1f} against "
              f"{row['us']['before/pair']['median']:6.1f} us ({row['pair_speedup']['estimate']:.3f}x), select "
              f"{row['us']['after/select']['median']:5.1f} against {row['us']['before/select']['median']:5.1f} us "
              f"({row['select_speedup']['estimate']:.3f}x){'' if equal else '  RESULTS DIFFER'}", flush=True)
        del preps, fns, q, c
        torch.cuda.empty_cache()
    path = write_result("similarity_select_bound",
                        {"d": D, "k": K, "dtype": "fp16", "before": str(args.before), "sm_mhz_after_warmup": clock,
                         "rows": rows}, args.tag)
    print(f"wrote {path}")
    return 0 if all(r["results_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
