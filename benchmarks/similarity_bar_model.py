"""How many keys a query's bar lets through at 50K / 100 under different rules for that bar, counted on the CPU over
Gaussian data (the benchmarks' draw: queries and corpus N(0, 1), fp16), with the geometry of the op's plan for the
default config on sm_90 (131 splits of 3 tiles of 128 rows on 132 SMs), two ping-pong groups a block whose first
tiles are the split's tiles 0 and 1, 32 accumulator holders of 4 rows per column in a group's tile (4 consecutive
rows here; the kernel's holder has rows g, g + 8, 64 + g and 72 + g of its warp's slice, which is the same for rows
drawn independently). A design input for issue 5's 4x goal, not a GPU measurement: it counts keys, not time.

Rules (each bar is backed by k keys at least as large, so every one keeps the answer exact):

  group_bounds_max   the filtered search's global bar at the end of a call (MERGE=6): the largest over the blocks'
                     groups of each group's first-tile bound, the k-th largest of its 32 holders' maxima. The search
                     appends keys against the bar each tile sees then, so it lets through at least this many (the GPU
                     count, results/similarity_select_trace_h100.json: 1,695 a query).
  tile_maxima_kth    the k-th largest of the first tiles' maxima (261 tiles of 128 rows: k distinct rows reach it):
                     what one exchange of 100 floats a block after its first tiles would give every block.
  first_tiles_kth    the k-th largest key of all first tiles (33K rows): the best bar the first tiles can give.
  bucket_words_min   k words per query, first tile t raising word t mod k with its maximum (an atomic max, as the
                     global bar's one word now): each word is a key of its own tiles, so the smallest of the k
                     words is backed by k distinct rows once every word has been raised.
  pilot_1_in_S       a pilot pass over every S-th row (S in PILOT_STRIDES): the k-th largest key of that sample,
                     known before the search starts (SIMILARITY.md, "A filter whose bars are known").

Also counted: the keys at or above each constant of CONSTANT_BARS, the one bar every query had in the probes of
that SIMILARITY.md section (TUNELAB_SIM_BAR_PROBE): not bars of any rule, only the appends those probes made.

Results: benchmarks/results/similarity_bar_model.json; a table last.

    python3 benchmarks/similarity_bar_model.py [--seeds 3]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result  # noqa: E402

NQ, N, D, K = 100, 50_000, 768, 10
SMS = 132  # the H100's and the H200's: the plan's splits
HOLDERS = 32  # accumulator holders of a column in a ping-pong group (params.cuh topk_column_holders(4, 1))
PILOT_STRIDES = (8, 32)  # a pilot over every S-th row
CONSTANT_BARS = (55.0, 71.0, 82.0)  # the probes' bars (results/similarity_key_stores_bar_probe*_h200.json)


def first_tile_rows(n: int, nq: int = NQ) -> list[range]:
    """The row ranges of every block's groups' first tiles (tiles 0 and 1 of each split, ping-pong) in the plan the
    op makes for the filtered search on the 50K / 100 default config (the launcher's topk_plan, SMS SMs)."""
    from tunelab import _core
    from tunelab.ops import similarity as sim

    cfg = dict(sim.default_config(100, K, "float16", D, arch="sm_90", n=65536), MERGE=sim.MERGE_FILTERED)
    plan = dict(_core.similarity.topk_plan(cfg, nq, n, SMS, 0))
    bn, per = cfg["BLOCK_N"], plan["tiles_per_split"]
    firsts = (s * per + t for s in range(plan["splits"]) for t in range(min(2, per)))
    return [range(tile * bn, min(n, (tile + 1) * bn)) for tile in firsts if tile < plan["num_tiles"]]


def bars(scores, k: int) -> dict:
    """Per query (rows of ``scores``, [nq][n] float32) the bar of each rule."""
    import numpy as np

    firsts = first_tile_rows(scores.shape[1])
    group_bounds, tile_max = [], []
    for r in firsts:
        tile = scores[:, r.start:r.stop]
        pad = (-tile.shape[1]) % HOLDERS
        if pad:
            tile = np.concatenate([tile, np.full((tile.shape[0], pad), -np.inf, np.float32)], axis=1)
        holder_max = tile.reshape(tile.shape[0], HOLDERS, -1).max(axis=2)  # 32 holders of 4 rows
        group_bounds.append(np.sort(holder_max, axis=1)[:, -k])
        tile_max.append(tile.max(axis=1))
    first_keys = np.concatenate([scores[:, r.start:r.stop] for r in firsts], axis=1)
    tile_max = np.stack(tile_max, 1)  # [nq][first tiles]
    words = np.stack([tile_max[:, j::k].max(axis=1) for j in range(k)], 1)  # word j: the tiles t with t % k == j
    return {"group_bounds_max": np.max(np.stack(group_bounds, 1), axis=1),
            "tile_maxima_kth": np.sort(tile_max, axis=1)[:, -k],
            "first_tiles_kth": np.sort(first_keys, axis=1)[:, -k],
            "bucket_words_min": words.min(axis=1),
            **{f"pilot_1_in_{stride}": np.sort(scores[:, ::stride], axis=1)[:, -k] for stride in PILOT_STRIDES}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="independent draws")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    import numpy as np

    counts = {}
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        corpus = rng.standard_normal((N, D), dtype=np.float32).astype(np.float16).astype(np.float32)
        queries = rng.standard_normal((NQ, D), dtype=np.float32).astype(np.float16).astype(np.float32)
        scores = queries @ corpus.T
        for rule, bar in bars(scores, K).items():
            counts.setdefault(rule, []).extend((scores >= bar[:, None]).sum(axis=1).tolist())
        for value in CONSTANT_BARS:
            counts.setdefault(f"constant_{value:g}", []).extend((scores >= value).sum(axis=1).tolist())
        print(f"seed {seed}: " + ", ".join(f"{r} {np.median(c[-NQ:]):.0f}" for r, c in counts.items()), flush=True)
    rows = {rule: {"median": float(np.median(c)), "p90": float(np.percentile(c, 90)), "max": int(max(c)),
                   "min": int(min(c))} for rule, c in counts.items()}
    path = write_result("similarity_bar_model", {"nq": NQ, "n": N, "d": D, "k": K, "data": "N(0, 1), fp16",
                                                 "seeds": args.seeds, "first_tiles": len(first_tile_rows(N)),
                                                 "keys_reaching_the_bar_per_query": rows}, args.tag)
    print(f"{'rule':<18} {'median':>8} {'p90':>8} {'max':>6}   keys per query that reach the bar (k = {K})")
    for rule, r in rows.items():
        print(f"{rule:<18} {r['median']:>8.0f} {r['p90']:>8.0f} {r['max']:>6}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
