"""One query against a small corpus (nq = 1, N from 50K): which tiling and which top-k path the default should take.

At nq = 1 the search is a pure stream of the corpus, yet at N = 50K the op took 41 us on the H200 and 48.5 on an
H100 against 24.4 and 32.5 for a kernel that only reads the corpus (results/similarity.json,
results/similarity_floor*.json). The default tiled 256 rows, which at 50K makes 196 tiles: 98 splits of two, so 34
of 132 SMs stream nothing. For each dtype (fp16, fp32) and N in ``--ns`` the script times, interleaved in rounds
with the core's protocol (L2 flush, CUDA events; CUDA-graph replay when one is under 20 us), each variant's search
then merge or select (prepared launches, as the op launches them):

  read         a streaming read of the corpus (16-byte loads, nothing written): the floor
  default      default_config(1, n=N), what the op takes (the shared-list running top-k, MERGE=2)
  BN=256       256-row tiles over 8 warps (the default at every N before SHORT_TILES_MAX_N was introduced)
  BN=128       128-row tiles (twice the tiles: at 50K 131 splits of three)
  BN=64        64-row tiles over 4 warps
  BN=256 dense 256-row tiles, every key to the 1 x N matrix (MERGE=5), then the select kernel
  BN=128 dense the same with 128-row tiles

Every variant's indices are checked against the default's (the same keys and tie rule: identical). Results:
benchmarks/results/similarity_small_nq.json (environment fingerprint inside); a table last.

    python3 benchmarks/similarity_small_nq.py [--ns 50000,200000,1000000] [--dtypes float16,float32]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_reader, draw_search_inputs, summarize, warm_up_gpu, write_result  # noqa: E402

NQ, D, K = 1, 768, 10


def variants(dtype: str, n: int) -> dict[str, dict]:
    """The configs compared at one dtype and corpus size (before fit_config)."""
    from tunelab.ops import similarity as sim

    base = sim.default_config(NQ, K, dtype, D, n=n)
    dense = sim.MERGE_DENSE
    return {"default": base, "BN=256": dict(base, BLOCK_N=256, WARPS_N=8), "BN=128": dict(base, BLOCK_N=128, WARPS_N=8),
            "BN=64": dict(base, BLOCK_N=64, WARPS_N=4), "BN=256 dense": dict(base, BLOCK_N=256, WARPS_N=8, MERGE=dense),
            "BN=128 dense": dict(base, BLOCK_N=128, WARPS_N=8, MERGE=dense)}


def main() -> int:
    import torch

    from similarity_dense import Prepared, time_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="50000,200000,1000000", help="comma-separated corpus sizes")
    ap.add_argument("--dtypes", default="float16,float32", help="comma-separated: float16, bfloat16, float32")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = ap.parse_args()
    ns_list = [int(x) for x in args.ns.split(",")]
    dtypes = [x.strip() for x in args.dtypes.split(",")]
    bad = [x for x in dtypes if x not in ("float16", "bfloat16", "float32")]
    if bad:
        ap.error(f"--dtypes {bad}: use float16, bfloat16 or float32")

    clock = warm_up_gpu()
    reader = corpus_reader()
    stream = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    rows = []
    for dtype in dtypes:
        for n in ns_list:
            q, c = draw_search_inputs(NQ, n, D, getattr(torch, dtype), seed=1)
            read = reader(c)
            preps = {name: Prepared(cfg, q, c) for name, cfg in variants(dtype, n).items()}
            fns = {"read": lambda: read(stream()), **preps}
            for p in preps.values():
                p()
            torch.cuda.synchronize()
            ref = preps["default"].indices.clone()
            equal = {name: bool(torch.equal(p.indices, ref)) for name, p in preps.items()}
            times, graph = time_all(fns, budget_s=1.0, rounds=args.rounds)
            row = {"nq": NQ, "n": n, "dtype": dtype, "timer": "cuda_graph" if graph else "events",
                   "indices_equal_default": equal,
                   "variants": {name: {"us": summarize(times[name]),
                                       **({"config": preps[name].config, "splits": preps[name].plan["splits"],
                                           "tiles_per_split": preps[name].plan["tiles_per_split"]}
                                          if name in preps else {})} for name in fns}}
            rows.append(row)
            times_text = "  ".join(f"{k} {v['us']['median']:.1f}" for k, v in row["variants"].items())
            print(f"{dtype:>8} N={n:>8}: {times_text}" + ("" if all(equal.values()) else f"  INDICES DIFFER: {equal}"),
                  flush=True)
    path = write_result("similarity_small_nq", {"nq": NQ, "d": D, "k": K, "sm_mhz_after_warmup": clock, "rows": rows})
    print(f"wrote {path}")
    names = list(rows[0]["variants"])
    print(f"{'dtype':>8} {'N':>8} " + " ".join(f"{x:>13}" for x in names))
    for r in rows:
        print(f"{r['dtype']:>8} {r['n']:>8} " + " ".join(f"{r['variants'][x]['us']['median']:13.1f}" for x in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
