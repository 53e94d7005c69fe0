"""Where the dense search's time goes at small N (issue 5's 50K / 100 goal): its fixed cost and its per-row cost,
set against a kernel that only reads the corpus, on one GPU.

For nq = 100 (fp16, d = 768, k = 10, inner product) and N in ``--ns`` the script times, interleaved in rounds
with the core's protocol (similarity_dense.time_all: L2 flush by a memset before every call, CUDA events; no
CUDA graphs, also where a variant takes under 20 us):

  read       a streaming read of the corpus (16-byte loads, nothing written): the floor of any search
  search     the dense search alone (MERGE=5: every key to the nq x N matrix), the 50K / 100 default's config
  nostores   the same config's diagnosis build (compile_search(trace=True)), whose key stores are compiled out: the
             main loop and the epilogue's arithmetic without the 20 MB of keys at 50K
  pair       search then select, as the op launches them (the select a programmatic launch on sm_90)
  fused      the fused default's search then merge (a running top-k per block, no key matrix)

A least-squares line ``us = fixed + per_row * N`` over the N values splits each variant into a fixed cost (launch,
ramp, tail) and a cost per corpus row; the read's line is the floor's. At 50K the diagnosis build also runs once
after a flush to record every block's timeline (when the producer and the MMA warps start, each ping-pong turn's
main loop and epilogue, when the block is done), in us from the first block's entry.

Results: benchmarks/results/similarity_dense_parts.json (environment fingerprint inside); a table last.
(results/similarity_dense_parts_h100.json: this script at 4a9eef7 on an H100; its first form, at 9c562ad, had
the same lines within 0.6 us fixed and 0.1 us per 100K rows.)
About a minute on an H100.

    python3 benchmarks/similarity_dense_parts.py [--ns 25000,50000,100000,200000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, current_stream, draw_search_inputs, int_list, summarize, warm_up_gpu,  # noqa: E402
                     write_result)

NQ, D, K = 100, 768, 10


def main() -> int:
    import numpy as np
    import torch

    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import next_pow2

    from similarity_dense import Prepared, storeless, time_all
    from similarity_probe import block_timeline, print_timeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int_list, default="25000,50000,100000,200000", help="comma-separated corpus sizes")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (similarity_dense.time_all)")
    args = ap.parse_args()
    ns_list = args.ns
    if len(ns_list) < 2:
        ap.error(f"--ns {args.ns}: the line needs at least two corpus sizes")

    clock = warm_up_gpu()
    reader = corpus_reader()
    dense_cfg = dict(sim.default_config(NQ, K, "float16", D, n=next_pow2(50_000)), MERGE=sim.MERGE_DENSE)
    fused_cfg = sim.default_config(NQ, K, "float16", D)

    rows, trace = [], None
    for n in ns_list:
        q, c = draw_search_inputs(NQ, n, D, torch.float16, seed=1)
        read = reader(c)
        dense, fused = Prepared(dense_cfg, q, c), Prepared(fused_cfg, q, c)
        nostores = storeless(dense, q, c)  # the diagnosis build of the same config, its key stores compiled out
        fns = {"read": lambda: read(current_stream()), "search": lambda: dense.search(current_stream()),
               "nostores": lambda: nostores(current_stream()), "pair": dense, "fused": fused}
        samples, _ = time_all(fns, budget_s=1.0, rounds=args.rounds, graph_below_us=0)  # a flush before every call
        # the pair's indices against the fused search's (the same keys and tie rule)
        dense()
        fused()
        torch.cuda.synchronize()
        equal = bool(torch.equal(dense.indices, fused.indices))
        rows.append({"nq": NQ, "n": n, "splits": dense.plan["splits"], "tiles_per_split": dense.plan["tiles_per_split"],
                     "indices_equal_fused": equal, "us": {k: summarize(v) for k, v in samples.items()}})
        if n == 50_000:
            trace = {"nq": NQ, "n": n, "variant": "dense, key stores compiled out",
                     "tiles_per_split": dense.plan["tiles_per_split"],
                     **block_timeline(nostores, dense.ck, dense.plan["q_tiles"] * dense.plan["splits"])}
        print(f"N={n:>7}: " + "  ".join(f"{k} {rows[-1]['us'][k]['median']:.1f}" for k in fns) +
              f"  (indices equal: {equal})", flush=True)

    xs = np.asarray([r["n"] for r in rows], dtype=np.float64)
    lines = {}
    for name in rows[0]["us"]:
        ys = np.asarray([r["us"][name]["median"] for r in rows])
        slope, fixed = np.polyfit(xs, ys, 1)
        lines[name] = {"fixed_us": float(fixed), "us_per_100k_rows": float(slope * 1e5),
                       "max_residual_us": float(np.max(np.abs(ys - (fixed + slope * xs))))}
    path = write_result("similarity_dense_parts", {"d": D, "k": K, "dtype": "fp16", "sm_mhz_after_warmup": clock,
                                                   "dense_config": dense_cfg, "fused_config": fused_cfg,
                                                   "rows": rows, "lines": lines, "timeline_50k_nostores": trace})
    print(f"wrote {path}")
    if trace:
        print_timeline(trace)
    print(f"{'variant':<10} {'fixed us':>9} {'us/100K rows':>13} {'max resid':>10}")
    for name, ln in lines.items():
        print(f"{name:<10} {ln['fixed_us']:9.1f} {ln['us_per_100k_rows']:13.1f} {ln['max_residual_us']:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
