"""fp32 searches of few queries: products by FFMA on the CUDA cores (MMA=4) against 3xTF32 on the tensor cores (MMA=0).

At nq <= 8 the fp32 main loop is bound by its instructions, not by HBM: 3xTF32 splits every corpus element into two
tf32 halves (4 instructions) and runs 3 MMAs per m16n8k8 step for one useful query column in eight
(results/ncu_similarity_fp32_nq1_h100.txt, similarity_fp32_compute.py). On the H200 that kept fp32 10M / nq = 1 at
0.89x torch's GEMV (similarity.py at 3e59260, before the Veltkamp split). MMA=4 keeps MMA 0's tiles and cp.async
ring but multiplies with FFMA, only for the warp's real query columns (1, 2, 4 or 8): per k-step two ldmatrix, 2
shuffles and 4 FFMAs per m16 block and column. This script measures, for each nq in ``--nqs`` (fp32, d = 768, k = 10, inner product):

  rate    each config over an L2-resident corpus (``--rate-n`` rows, 38 MB at 12288) on 8 blocks, back to back without
          an L2 flush (the instruction ceiling, as similarity_fp32_compute.py), in GB/s per busy SM, next to a kernel
          that only reads the same bytes on every SM
  search  for each N in ``--ns``, interleaved rounds with the core's protocol (L2 flush, CUDA events;
          similarity_dense.time_all): torch.topk(Q @ C.T), the few-query config on 256-row tiles
          (default_config(nq, n=N) with BLOCK_N=256) with MMA=0 (3xTF32) and with MMA=4 (with ``--short-tiles``
          also MMA=4 on 128-row tiles, "fma-128", the default up to FMA_SHORT_TILES_MAX_N rows since it was
          measured here: at 50K the 256-row tiles make 98 splits of two and leave 34 of 132 SMs idle); the index
          sets of each against a float64 reference on the same inputs

Results: benchmarks/results/similarity_fp32_fma[_TAG].json (environment fingerprint inside); a table last.

    python3 benchmarks/similarity_fp32_fma.py [--nqs 1,2,4,8] [--ns 50000,1000000,10000000] [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, current_stream, draw_search_inputs, int_list, int_list_in, speedup,  # noqa: E402
                     warm_up_gpu, write_result)

D, K = 768, 10


def reference_agreement(q, c, indices) -> float:
    """Fraction of the top-k index sets shared with a float64 reference (the same rows, any order): the fp32 scores'
    256 best rows of each query, rescored in float64 (their rounding cannot move a top-10 row past 256 places)."""
    import torch

    cand = (q @ c.T).topk(256, dim=1).indices
    s = torch.einsum("qd,qkd->qk", q.double(), c[cand].double())
    ref = torch.gather(cand, 1, s.topk(K, dim=1).indices)
    same = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(indices.cpu(), ref.cpu())]
    return sum(same) / (K * len(same))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nqs", type=int_list_in(1, 8, "MMA=4 is for few queries"), default="1,2,4,8",
                    help="comma-separated query counts (1..8)")
    ap.add_argument("--ns", type=int_list, default="50000,1000000,10000000",
                    help="comma-separated corpus sizes for the search rows")
    ap.add_argument("--rate-n", type=int, default=12288, help="rows of the L2-resident corpus of the rate rows")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the search rows")
    ap.add_argument("--budget-s", type=float, default=1.5, help="seconds of samples per shape and round set")
    ap.add_argument("--short-tiles", action="store_true", help="also time MMA=4 with 128-row tiles (fma-128)")
    ap.add_argument("--no-rate", action="store_true", help="skip the L2-resident rate rows")
    ap.add_argument("--tag", default="", help="suffix of the results file")
    args = ap.parse_args()
    nqs, ns = args.nqs, args.ns
    import torch

    from similarity_dense import Prepared, time_all, variant_rows
    from similarity_fp32_compute import check_l2_resident, l2_resident_rate
    from tunelab.ops import similarity as sim
    from tunelab.tuning.families.similarity import torch_topk

    clock = warm_up_gpu()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    reader = corpus_reader()
    rate_rows, search_rows = [], []
    for nq in ([] if args.no_rate else nqs):  # the instruction ceiling: an L2-resident corpus, no flush
        q, c = draw_search_inputs(nq, args.rate_n, D, torch.float32, seed=nq)
        nbytes = c.numel() * 4
        check_l2_resident(nbytes, props, f"--rate-n {args.rate_n}")
        base = dict(sim.default_config(nq, K, "float32", D, n=args.rate_n), BLOCK_N=256)  # the rows measured before
        row = {"nq": nq, "n": args.rate_n, "corpus_bytes": nbytes}
        for name, cfg in (("3xtf32", dict(base, MMA=0)), ("fma", dict(base, MMA=4))):
            prep = Prepared(cfg, q, c, splits=8)
            stream = current_stream()
            busy = prep.plan["q_tiles"] * prep.plan["splits"]
            row[name] = dict(l2_resident_rate(lambda: prep.search(stream), nbytes, busy, 200), config=prep.config)
        row["read"] = l2_resident_rate(reader(c), nbytes, props.multi_processor_count, 200)
        rate_rows.append(row)
        print(f"rate nq={nq}: 3xTF32 {row['3xtf32']['GBps_per_busy_sm']:.1f}, FMA {row['fma']['GBps_per_busy_sm']:.1f}"
              f" GB/s per busy SM (read {row['read']['GBps_per_busy_sm']:.1f} per SM)", flush=True)
        del q, c
    for n in ns:
        for nq in nqs:
            q, c = draw_search_inputs(nq, n, D, torch.float32, seed=n + nq)
            base = dict(sim.default_config(nq, K, "float32", D, n=n), BLOCK_N=256)  # fma-128 the default up to 128K
            preps = {"3xtf32": Prepared(dict(base, MMA=0), q, c), "fma": Prepared(dict(base, MMA=4), q, c)}
            if args.short_tiles:
                preps["fma-128"] = Prepared(dict(base, MMA=4, BLOCK_N=128), q, c)
            agree = {}
            for name, p in preps.items():
                p()
                torch.cuda.synchronize()
                agree[name] = reference_agreement(q, c, p.indices)
            times, graph = time_all({"torch": torch_topk(q, c, K, "ip"), **preps}, budget_s=args.budget_s,
                                    rounds=args.rounds)
            row = {"nq": nq, "n": n, "timer": "cuda_graph" if graph else "events", "hbm_bytes": c.numel() * 4,
                   "variants": variant_rows(times, preps, "3xtf32")}
            for name, v in row["variants"].items():
                v["read_TBps"] = row["hbm_bytes"] / v["us"]["median"] / 1e6
                if name in agree:
                    v["reference_agreement"] = agree[name]
            if "fma-128" in preps:
                row["variants"]["fma-128"]["speedup_vs_fma"] = speedup(times["fma"], times["fma-128"])
            search_rows.append(row)
            vv = row["variants"]
            print(f"N={n:>8} nq={nq}: torch {vv['torch']['us']['median']:.1f}  3xTF32 "
                  f"{vv['3xtf32']['us']['median']:.1f}  FMA {vv['fma']['us']['median']:.1f} us  (FMA "
                  f"{vv['fma']['speedup_vs_3xtf32']['estimate']:.3f}x 3xTF32, "
                  f"{vv['fma']['speedup_vs_torch']['estimate']:.3f}x torch; agreement {agree['3xtf32']:.4f} / "
                  f"{agree['fma']:.4f})" + (f"; fma-128 {vv['fma-128']['us']['median']:.1f} us"
                                            if "fma-128" in vv else ""), flush=True)
            del preps, q, c
            torch.cuda.empty_cache()
    path = write_result("similarity_fp32_fma",
                        {"d": D, "k": K, "metric": "ip", "sm_mhz_after_warmup": clock, "rate": rate_rows,
                         "search": search_rows}, args.tag)
    print(f"wrote {path}")
    if rate_rows:
        print(f"{'nq':>3} {'rate GB/s/SM 3xTF32':>20} {'FMA':>7} {'read':>7}")
    for r in rate_rows:
        print(f"{r['nq']:>3} {r['3xtf32']['GBps_per_busy_sm']:>20.1f} {r['fma']['GBps_per_busy_sm']:>7.1f} "
              f"{r['read']['GBps_per_busy_sm']:>7.1f}")
    print(f"{'N':>9} {'nq':>3} {'torch us':>10} {'3xTF32':>10} {'FMA':>10} {'FMA/3xTF32':>11} {'FMA/torch':>10} "
          f"{'TB/s':>6}" + (f" {'FMA-128 us':>10} {'/FMA':>6}" if args.short_tiles else ""))
    for r in search_rows:
        v = r["variants"]
        print(f"{r['n']:>9} {r['nq']:>3} {v['torch']['us']['median']:>10.1f} {v['3xtf32']['us']['median']:>10.1f} "
              f"{v['fma']['us']['median']:>10.1f} {v['fma']['speedup_vs_3xtf32']['estimate']:>11.3f} "
              f"{v['fma']['speedup_vs_torch']['estimate']:>10.3f} {v['fma']['read_TBps']:>6.2f}"
              + (f" {v['fma-128']['us']['median']:>10.1f} {v['fma']['us']['median'] / v['fma-128']['us']['median']:>6.3f}"
                 if "fma-128" in v else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
