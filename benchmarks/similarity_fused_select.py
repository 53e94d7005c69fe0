"""Experiment: what the filtered select's own kernel costs after a MERGE=7 search, measured by moving the select
into the search (TUNELAB_SIM_FUSED_SELECT, csrc/kernels/similarity/topk.cuh TopkBlock::fw_fused_select()).

The fused build ends MERGE=7's search with a grid-wide barrier, then a warp per query runs select_filtered.cuh's
warp select and writes the answer into the row's own segment 0 (count k, the other segments' counts 0). Its pair
(the search, then the unchanged select kernel, which then reads k entries a query) must give the dense search's
answer; its search alone then holds the whole select. The barrier needs every block resident (one wave on an
otherwise idle GPU: the default grid at these shapes) and a zeroed word, query row 0's word kFilterWords of the
candidate keys, which this script zeroes once per buffer (kept zero by the barrier itself after that).

For each shape (d = 768, k = 10, fp16, inner product), interleaved with the core's protocol (L2 flush, CUDA events):

  torch        torch.topk(Q @ C.T), the family's baseline
  dense        the default config with MERGE=5 (search + select)
  warps        the same config with MERGE=7 (search + filtered select)
  warps-fused  MERGE=7 built with TUNELAB_SIM_FUSED_SELECT=1 (search with the select inside + the select kernel
               over k entries a query)

and each arm's two kernels alone (search, select). Checks: every arm's indices and scores equal the dense search's,
and after the fused search alone every row's segment counts are (k, 0, 0, ...): its select ran.
Results: benchmarks/results/similarity_fused_select[_TAG].json; a table last.

    python3 benchmarks/similarity_fused_select.py [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, kernel_variant, warm_up_gpu, write_result  # noqa: E402
from similarity_dense import K, Prepared, kernels_alone, time_all, variant_rows  # noqa: E402

D = 768
SHAPES = [(100, 50_000), (1, 50_000)]
FUSED = {"TUNELAB_SIM_FUSED_SELECT": "1"}
FILTER_WORDS = 36  # params.cuh kFilterWords: the barrier's word follows the bar words


def fused_ran(prep: Prepared) -> bool:
    """After prep's search alone: every row's counts are (k, 0, ...), i.e. the in-search select rewrote them."""
    import torch

    from tunelab.ops import similarity as sim

    prep.search(int(torch.cuda.current_stream().cuda_stream))
    torch.cuda.synchronize()
    counts = sim.filter_counts(prep.ci, prep.plan, prep.config)
    return bool((counts[:, 0] == K).all() and (counts[:, 1:] == 0).all())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default="", help="suffix of the result file's name (e.g. h100)")
    args = ap.parse_args()
    import torch

    from tunelab.ops import similarity as sim
    from tunelab.tuning.families.similarity import torch_topk
    from tunelab.tuning.family import next_pow2

    clock = warm_up_gpu()
    rows = []
    for nq, n in SHAPES:
        q, c = draw_search_inputs(nq, n, D, torch.float16, seed=n + nq)
        dense_cfg = dict(sim.default_config(nq, K, "float16", D, n=min(next_pow2(n), sim.DENSE_MAX_N)),
                         MERGE=sim.MERGE_DENSE)
        fns = {"dense": Prepared(dense_cfg, q, c),
               "warps": Prepared(dict(dense_cfg, MERGE=sim.MERGE_FILTER_WARPS), q, c)}
        with kernel_variant(defines=FUSED):
            fused = fns["warps-fused"] = Prepared(dict(dense_cfg, MERGE=sim.MERGE_FILTER_WARPS), q, c)
        splits = int(fused.plan["splits"])
        if splits <= FILTER_WORDS:
            raise SystemExit(f"nq={nq} N={n}: {splits} splits leave no word for the barrier (needs > {FILTER_WORDS})")
        fused.ck[0, splits * sim.filter_rows(fused.plan, fused.config) + FILTER_WORDS] = 0.0  # the barrier's word
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        same = {a: bool(torch.equal(f.indices, fns["dense"].indices) and torch.equal(f.scores, fns["dense"].scores))
                for a, f in fns.items()}
        ran = fused_ran(fused)
        fns = {"torch": torch_topk(q, c, K, "ip"), **fns}
        samples, graph = time_all(fns, budget_s=1.5, rounds=5)
        row = {"nq": nq, "n": n, "d": D, "k": K, "dtype": "float16", "timer": "cuda_graph" if graph else "events",
               "splits": splits, "equals_dense": same, "fused_select_ran": ran,
               "variants": variant_rows(samples, fns, "dense"),
               "kernels_alone": {a: kernels_alone(fns[a]) for a in fns if a != "torch"}}
        rows.append(row)
        del fns, fused, q, c
        torch.cuda.empty_cache()
    path = write_result("similarity_fused_select", {"sm_mhz_after_warmup": clock, "defines": FUSED, "rows": rows},
                        args.tag)
    print(f"wrote {path}")
    arms = ("torch", "dense", "warps", "warps-fused")
    print(f"{'nq':>4} {'N':>7}  " + "  ".join(f"{a:>16}" for a in arms) + "  search/select alone (us)")
    for r in rows:
        cells = []
        for a in arms:
            v = r["variants"][a]
            sp = v.get("speedup_vs_torch", {}).get("estimate")
            cells.append(f"{v['us']['median']:8.1f}" + (f" {sp:6.2f}x" if sp else " " * 8))
        alone = "  ".join(f"{a} {v['search_us']['median']:.1f}/{v['merge_us']['median']:.1f}"
                          for a, v in r["kernels_alone"].items())
        bad = [a for a, ok in r["equals_dense"].items() if not ok]
        print(f"{r['nq']:>4} {r['n']:>7}  " + "  ".join(cells) + f"  {alone}"
              + (f"  MISMATCH {bad}" if bad else "") + ("" if r["fused_select_ran"] else "  FUSED SELECT DID NOT RUN"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
