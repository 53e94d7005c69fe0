"""Few queries against a small corpus (nq = 1 by default, N from 50K): which tiling and which top-k path the default
should take.

At nq = 1 the search is a pure stream of the corpus, yet at N = 50K the op took 41 us on the H200 and 48.5 on an H100
against 24.4 and 32.5 for a kernel that only reads the corpus (results/similarity.json at 3e59260, in git history;
results/similarity_floor*.json). The default tiled 256 rows, which at 50K makes 196 tiles: 98 splits of two, so 34 of
132 SMs stream nothing. For each dtype (fp16, fp32) and N in ``--ns`` the script times, interleaved in rounds with the
core's protocol (L2 flush, CUDA events; CUDA-graph replay when one is under 20 us), each variant's search then merge or
select (prepared launches, as the op launches them):

  read         a streaming read of the corpus (16-byte loads, nothing written): the floor
  default      default_config(nq, n=next_pow2(N)), what the op takes: since 76449c4 on sm_90 (16-bit, up to
               DENSE_MAX_N rows) a dense search, before the shared-list running top-k (MERGE=2) that the BN=128 and
               BN=256 arms keep
  BN=256       256-row tiles over 8 warps (the default at every N before SHORT_TILES_MAX_N was introduced)
  BN=128       128-row tiles (twice the tiles: at 50K 131 splits of three)
  BN=64        64-row tiles over 4 warps
  BN=256 dense 256-row tiles, every key to the 1 x N matrix (MERGE=5), then the select kernel
  BN=128 dense the same with 128-row tiles
  pp dense BN=64   (sm_90, 16-bit) ping-pong warpgroups on the TMA ring (MMA=3), 64-row tiles, 5 stages, every
               key to the matrix, then the select kernel: the tuner's best at 1 x 50K on an H100
               (results/tune_similarity_1x50000x768x10_h100.json)
  pp dense BN=128  the same with 128-row tiles

(results/similarity_small_nq_pp*_h100.json were recorded before the dense rule, at b8c28ac: their "default" is the
fused default, the BN=128 arm. Their environment records 4a9eef7+dirty, the device copy's stale git metadata.)

Every variant's indices are checked against the default's (the same keys and tie rule: identical). Results:
benchmarks/results/similarity_small_nq.json (environment fingerprint inside); a table last.

    python3 benchmarks/similarity_small_nq.py [--ns 50000,200000,1000000] [--dtypes float16,float32] [--nqs 1]
                                              [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (corpus_reader, current_stream, draw_search_inputs, int_list, int_list_in,  # noqa: E402
                     summarize, warm_up_gpu, write_result)

D, K = 768, 10


def variants(nq: int, dtype: str, n: int) -> dict[str, dict]:
    """The configs compared at one query count, dtype and corpus size (before fit_config)."""
    from tunelab.ops import similarity as sim
    from tunelab.tuning.family import next_pow2

    base = sim.default_config(nq, K, dtype, D, n=next_pow2(n))  # as the op: the store bucket's N
    mm = sim.default_config(nq, K, dtype, D)  # without N: the fused mma.sync config the arms below vary
    dense = sim.MERGE_DENSE
    out = {"default": base, "BN=256": dict(mm, BLOCK_N=256, WARPS_N=8), "BN=128": dict(mm, BLOCK_N=128, WARPS_N=8),
           "BN=64": dict(mm, BLOCK_N=64, WARPS_N=4), "BN=256 dense": dict(mm, BLOCK_N=256, WARPS_N=8, MERGE=dense),
           "BN=128 dense": dict(mm, BLOCK_N=128, WARPS_N=8, MERGE=dense)}
    pp = sim.default_config(nq, K, dtype, D, n=sim.DENSE_MAX_N)  # sm_90, 16-bit: the ping-pong dense default
    if pp["MMA"] == 3:
        out["pp dense BN=64"] = dict(pp, BLOCK_N=64)
        out["pp dense BN=128"] = dict(pp, BLOCK_N=128)
    return out


def main() -> int:
    import torch

    from similarity_dense import Prepared, time_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int_list, default="50000,200000,1000000", help="comma-separated corpus sizes")
    ap.add_argument("--dtypes", default="float16,float32", help="comma-separated: float16, bfloat16, float32")
    ap.add_argument("--nqs", type=int_list_in(1, 8, "the few-query default's range"), default="1",
                    help="comma-separated query counts (1..8)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--tag", default="", help="suffix of the results file (similarity_small_nq_<tag>.json)")
    args = ap.parse_args()
    ns_list, nqs = args.ns, args.nqs
    dtypes = [x.strip() for x in args.dtypes.split(",")]
    bad = [x for x in dtypes if x not in ("float16", "bfloat16", "float32")]
    if bad:
        ap.error(f"--dtypes {bad}: use float16, bfloat16 or float32")

    clock = warm_up_gpu()
    reader = corpus_reader()
    rows = []
    for nq, dtype, n in ((nq, dtype, n) for nq in nqs for dtype in dtypes for n in ns_list):
        q, c = draw_search_inputs(nq, n, D, getattr(torch, dtype), seed=1)
        read = reader(c)
        preps = {name: Prepared(cfg, q, c) for name, cfg in variants(nq, dtype, n).items()}
        fns = {"read": lambda: read(current_stream()), **preps}
        for p in preps.values():
            p()
        torch.cuda.synchronize()
        ref = preps["default"].indices.clone()
        equal = {name: bool(torch.equal(p.indices, ref)) for name, p in preps.items()}
        times, graph = time_all(fns, budget_s=1.0, rounds=args.rounds)
        row = {"nq": nq, "n": n, "dtype": dtype, "timer": "cuda_graph" if graph else "events",
               "indices_equal_default": equal,
               "variants": {name: {"us": summarize(times[name]),
                                   **({"config": preps[name].config, "splits": preps[name].plan["splits"],
                                       "tiles_per_split": preps[name].plan["tiles_per_split"]}
                                      if name in preps else {})} for name in fns}}
        rows.append(row)
        times_text = "  ".join(f"{k} {v['us']['median']:.1f}" for k, v in row["variants"].items())
        differ = "" if all(equal.values()) else f"  INDICES DIFFER: {equal}"
        print(f"nq={nq} {dtype:>8} N={n:>8}: {times_text}{differ}", flush=True)
    path = write_result("similarity_small_nq", {"nqs": nqs, "d": D, "k": K, "sm_mhz_after_warmup": clock,
                                                "rows": rows}, args.tag)
    print(f"wrote {path}")
    names = list(dict.fromkeys(x for r in rows for x in r["variants"]))
    print(f"{'nq':>3} {'dtype':>8} {'N':>8} " + " ".join(f"{x:>15}" for x in names))
    for r in rows:
        cells = (f"{r['variants'][x]['us']['median']:15.1f}" if x in r["variants"] else f"{'-':>15}" for x in names)
        print(f"{r['nq']:>3} {r['dtype']:>8} {r['n']:>8} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
