"""fp32 searches of 9..112 queries over small corpora: the fused default against the dense search the tuner found.

The tuner at 100 x 50K fp32 on an H100 (results/tune_similarity_100x50000x768x10_fp32_h100.json) confirmed the dense
search on the mma.sync loop (MERGE=5: every key to the nq x N matrix, then the select kernel; 128-row tiles, 64-element
slices, 4 x 2 warps, 2 stages) at 162 us against the default's 251. This script checks that finding across the
shapes a default rule would cover. For each nq in ``--nqs`` and N in ``--ns`` (fp32, d = 768, k = 10, inner product)
it times, interleaved in rounds with the core's protocol (L2 flush, CUDA events; similarity_dense.time_all):

  torch       torch.topk(Q @ C.T), the family's baseline
  fused       the fused default, default_config(nq) without N (256-row tiles): what the op takes above DENSE_MAX_N
              rows, and took everywhere before 8878000
  fused-128   the same with 128-row tiles (at 50K the 256-row tiles make 98 splits of two and leave 34 of 132 SMs
              idle)
  dense       the dense default, default_config(nq, n=DENSE_MAX_N) (sm_90: the tuner's config, BLOCK_Q = nq rounded
              up to 16), also past DENSE_MAX_N rows, where the op does not take it

Every variant's indices are checked against fused-128's (the same keys and tie rule: identical). Results:
benchmarks/results/similarity_fp32_small[_<tag>].json (environment fingerprint inside); a table last.
(results/similarity_fp32_small_h100.json was recorded before the dense rule, at f38fbc7: its "default" arm is the
fused default, this script's "fused" now, and it has no "fused" arm. Its environment records 4a9eef7+dirty, the
device copy's stale git metadata.)

    python3 benchmarks/similarity_fp32_small.py [--nqs 16,32,100] [--ns 10000,25000,50000,65536,100000] [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, int_list, int_list_in, summarize, warm_up_gpu, write_result  # noqa: E402

D, K = 768, 10


def variants(nq: int) -> dict[str, dict]:
    """The configs compared at one query count (before fit_config)."""
    from tunelab.ops import similarity as sim

    fused = sim.default_config(nq, K, "float32", D)
    return {"fused": fused, "fused-128": dict(fused, BLOCK_N=128),
            "dense": sim.default_config(nq, K, "float32", D, n=sim.DENSE_MAX_N)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nqs", type=int_list_in(9, 112, "the range a dense default would cover"), default="16,32,100",
                    help="comma-separated query counts (9..112)")
    ap.add_argument("--ns", type=int_list, default="10000,25000,50000,65536,100000",
                    help="comma-separated corpus sizes")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--tag", default="", help="suffix of the results file")
    args = ap.parse_args()
    nqs, ns = args.nqs, args.ns
    import torch

    from similarity_dense import Prepared, time_all
    from tunelab.tuning.families.similarity import torch_topk

    clock = warm_up_gpu()
    rows = []
    for nq in nqs:
        for n in ns:
            q, c = draw_search_inputs(nq, n, D, torch.float32, seed=n + nq)
            preps = {name: Prepared(cfg, q, c) for name, cfg in variants(nq).items()}
            for p in preps.values():
                p()
            torch.cuda.synchronize()
            ref = preps["fused-128"].indices.clone()
            equal = {name: bool(torch.equal(p.indices, ref)) for name, p in preps.items()}
            times, graph = time_all({"torch": torch_topk(q, c, K, "ip"), **preps}, budget_s=1.0, rounds=args.rounds)
            row = {"nq": nq, "n": n, "dtype": "float32", "timer": "cuda_graph" if graph else "events",
                   "indices_equal_fused_128": equal,
                   "variants": {name: {"us": summarize(t),
                                       **({"config": preps[name].config, "splits": preps[name].plan["splits"]}
                                          if name in preps else {})} for name, t in times.items()}}
            rows.append(row)
            text = "  ".join(f"{k} {v['us']['median']:.1f}" for k, v in row["variants"].items())
            differ = "" if all(equal.values()) else f"  INDICES DIFFER: {equal}"
            print(f"nq={nq:>3} N={n:>7}: {text}{differ}", flush=True)
            del preps, q, c
            torch.cuda.empty_cache()
    path = write_result("similarity_fp32_small", {"d": D, "k": K, "sm_mhz_after_warmup": clock, "rows": rows},
                        args.tag)
    print(f"wrote {path}")
    names = ("torch", "fused", "fused-128", "dense")
    print(f"{'nq':>4} {'N':>7} " + " ".join(f"{x:>10}" for x in names) + "  dense vs fused")
    for r in rows:
        v = r["variants"]
        gain = v["fused"]["us"]["median"] / v["dense"]["us"]["median"]
        cells = " ".join(f"{v[x]['us']['median']:10.1f}" for x in names)
        print(f"{r['nq']:>4} {r['n']:>7} {cells}  {gain:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
