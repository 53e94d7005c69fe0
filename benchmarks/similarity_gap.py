"""What the search-then-merge sequence costs beyond its two kernels (H200 diagnosis for issue 5).

The stream probe once measured, at nq = 100, N = 50K: search 43.1 us, merge 6.7 us alone, but search then merge
56.9 us. This script found why: the probe timed its merge on the candidate lists an all-NaN search had left (the
merge then has nothing to offer: 6.7-8.5 us); on real lists the shared-list merge took 15-16 us, and the sum held.
That led to the sorted-list merge (merge kind 4, csrc/kernels/similarity/merge_sorted.cuh). It times, on the same
prepared launches, with the core's protocol (L2 flush, CUDA events, median of ``--samples``):

  search, merge            each alone (merge: the kind the op picks)
  search+merge             as the op launches them
  search+search            the fixed cost of a second launch after the search
  merge+merge              the same for the merge
  merge no flush           the merge with its lists still in L2
  merge on NaN lists       the merge on the lists an all-NaN query search leaves (the probe's old mistake)
  search again             the search once more (drift over the run)
  carve=100 search+merge   both kernels told to prefer the largest shared-memory carveout (the SM then need not
                           re-partition L1/shared between them): measured no different
  graph search+merge       ten search+merge pairs replayed from a CUDA graph, per pair (launch latency hidden;
                           the corpus partly in L2 from the pair before)

With ``--placement`` it instead asks whether the search time depends on where the corpus lies in memory (the
50K / 100 search took 43.6 us on the corpus-first draw, 58.5 on queries-first, with statistically identical
data): the same corpus copied into a larger buffer at row offsets ``--offsets``, the search and torch's
matmul + topk timed at each, with the corpus and query addresses modulo 2 MiB.

Usage: python3 benchmarks/similarity_gap.py [--shapes 100x50000,100x1000000,1x10000000] [--samples 200]
       python3 benchmarks/similarity_gap.py --placement [--offsets 0,1,8,64,683,1365,2731] [--shapes 100x50000]
Writes benchmarks/results/similarity_gap.json (and $OUT/ when set), prints a table last.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DRAW_ORDERS, current_stream, draw_search_inputs, nq_n_list, summarize,  # noqa: E402
                     write_result)

K = 10
D = 768


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=nq_n_list, default=((100, 50_000), (100, 1_000_000), (1, 10_000_000)),
                    metavar="NQxN,...", help="NQxN,... (d = 768, k = 10, fp16; default 100x50000,100x1000000,"
                                             "1x10000000)")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--data", default=",".join(DRAW_ORDERS),
                    help=f"how the random inputs are drawn from one seed (_common.draw_search_inputs): one or more "
                         f"of {', '.join(DRAW_ORDERS)}, comma-separated")
    ap.add_argument("--placement", action="store_true", help="time the search with the corpus at --offsets")
    ap.add_argument("--offsets", default="0,1,8,64,683,1365,2731",
                    help="corpus row offsets in its buffer (1536-byte rows at d = 768: 683 ~ 1 MiB, 1365 ~ 2 MiB)")
    args = ap.parse_args()
    draws = args.data.split(",")
    if bad := [x for x in draws if x not in DRAW_ORDERS]:
        ap.error(f"--data {','.join(bad)}: not a draw order; use one or more of {', '.join(DRAW_ORDERS)}")

    import torch

    from tunelab.ops import similarity as sim
    from tunelab.timing import time_callable

    dev = torch.cuda.current_device()
    stream = current_stream()

    def t(fn, **kw):
        """The core's timing protocol on ``fn``, summarized."""
        return summarize(time_callable(fn, warmup=10, samples=args.samples, stream=stream, **kw))

    def compiled(nq, n):
        """The op's config for the shape, compiled; its launch plan; the candidate and output buffers."""
        cfg, _ = sim.resolve_config(dev, nq=nq, n=n, d=D, k=K, dtype="float16", metric="ip")
        cs = sim.compile_search(cfg, dtype="float16", metric="ip", arch=sim._arch(dev))
        plan = cs.plan(dev, nq, n, K)
        bufs = (torch.empty((plan["splits"], nq, K), dtype=torch.float32, device="cuda"),
                torch.empty((plan["splits"], nq, K), dtype=torch.int32, device="cuda"),
                torch.empty((nq, K), dtype=torch.float32, device="cuda"),
                torch.empty((nq, K), dtype=torch.int64, device="cuda"))
        return cfg, cs, plan, bufs

    def measure(nq, n, data):
        q, c = draw_search_inputs(nq, n, D, torch.float16, data)
        cfg, cs, plan, (ck, ci, sc, ix) = compiled(nq, n)
        p_s, p_m = cs.prepare(dev, q, c, K, ck, ci, sc, ix, plan)
        nans = torch.full_like(q, float("nan"))
        p_nan, _ = cs.prepare(dev, nans, c, K, ck, ci, sc, ix, plan)
        kind = cs.merge_args(ck, ci, q, K, plan["splits"], out_score=sc, out_index=ix)[4]
        f_s, f_m = cs.functions(dev)[0], cs.merge_function(dev, kind)

        res = {"nq": nq, "n": n, "data": data, "config": cfg, "splits": plan["splits"], "merge_kind": kind,
               "corpus_addr_mod_2MiB": c.data_ptr() % (2 << 20), "query_addr_mod_2MiB": q.data_ptr() % (2 << 20)}
        res["search"] = t(p_s)
        res["merge"] = t(p_m)
        res["search+merge"] = t(lambda: (p_s(stream), p_m(stream)))
        res["search+search"] = t(lambda: (p_s(stream), p_s(stream)))
        res["merge+merge"] = t(lambda: (p_m(stream), p_m(stream)))
        res["merge no flush"] = t(p_m, flush_l2=False)
        p_nan(stream)  # the candidate lists a NaN-query search leaves (what the probe's merge timing read)
        res["merge on NaN lists"] = t(p_m)
        res["search again"] = t(p_s)
        f_m.set_shared_carveout(100)
        f_s.set_shared_carveout(100)
        res["carve=100 search+merge"] = t(lambda: (p_s(stream), p_m(stream)))
        f_m.set_shared_carveout(-1)
        f_s.set_shared_carveout(-1)
        res["graph search+merge"] = t(lambda: (p_s(current_stream()), p_m(current_stream())), cuda_graph=True,
                                      graph_launches=10)
        ref = torch.topk(q.float() @ c.float().T, K, dim=1)
        p_s(stream), p_m(stream)
        torch.cuda.synchronize()
        res["index_agreement_with_fp32_topk"] = float((ix == ref.indices).float().mean())
        return res

    def placement(nq, n):
        q0, base = draw_search_inputs(nq, n, D, torch.float16)
        offsets = [int(x) for x in args.offsets.split(",")]
        buf = torch.empty((n + max(offsets), D), device="cuda", dtype=torch.float16)
        qbuf = torch.empty((nq + 64, D), device="cuda", dtype=torch.float16)
        _, cs, plan, (ck, ci, sc, ix) = compiled(nq, n)
        ref = torch.topk(q0.float() @ base.float().T, K, dim=1).indices
        out = []
        for qoff in (0, 1):
            q = qbuf[qoff:qoff + nq]
            q.copy_(q0)
            for off in offsets:
                c = buf[off:off + n]
                c.copy_(base)
                p_s, p_m = cs.prepare(dev, q, c, K, ck, ci, sc, ix, plan)
                r = {"nq": nq, "n": n, "corpus_row_offset": off, "query_row_offset": qoff,
                     "corpus_addr_mod_2MiB": c.data_ptr() % (2 << 20), "query_addr_mod_2MiB": q.data_ptr() % (2 << 20)}
                r["search"] = t(p_s)
                r["search+merge"] = t(lambda: (p_s(stream), p_m(stream)))
                r["torch"] = t(lambda: torch.topk(q @ c.T, K, dim=1))
                p_s(stream), p_m(stream)
                torch.cuda.synchronize()
                r["index_agreement_with_fp32_topk"] = float((ix == ref).float().mean())
                out.append(r)
        return out

    if args.placement:
        rows = []
        for nq, n in args.shapes:
            rows += placement(nq, n)
        path = write_result("similarity_gap_placement", {"rows": rows})
        print(f"wrote {path}")
        print(f"{'shape':>13} {'c off':>6} {'q off':>5} {'c mod 2M':>9} {'q mod 2M':>9} {'search':>8} "
              f"{'s+merge':>8} {'torch':>8}  agree")
        for r in rows:
            print(f"{r['nq']:>4}x{r['n']:<8} {r['corpus_row_offset']:>6} {r['query_row_offset']:>5} "
                  f"{r['corpus_addr_mod_2MiB']:>9} {r['query_addr_mod_2MiB']:>9} {r['search']['median']:>8.1f} "
                  f"{r['search+merge']['median']:>8.1f} {r['torch']['median']:>8.1f}  "
                  f"{r['index_agreement_with_fp32_topk']:.3f}")
        return 0

    rows = []
    for nq, n in args.shapes:
        for data in draws:
            rows.append(measure(nq, n, data))
            torch.cuda.empty_cache()

    keys = ["search", "merge", "search+merge", "search+search", "merge+merge", "merge no flush", "merge on NaN lists",
            "search again", "carve=100 search+merge", "graph search+merge"]
    path = write_result("similarity_gap", {"rows": rows})
    print(f"wrote {path}")
    print(f"{'shape':>13}{'data':>8}" + " ".join(f"{k[:14]:>14}" for k in keys) + "  agree")
    for r in rows:
        print(f"{r['nq']:>4}x{r['n']:<8}{r['data'][:7]:>8}" + " ".join(f"{r[k]['median']:>14.1f}" for k in keys)
              + f"  {r['index_agreement_with_fp32_topk']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
