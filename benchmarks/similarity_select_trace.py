"""Where a select kernel's time goes after its search (fp16, d = 768, k = 10, inner product): its diagnosis build
(TUNELAB_SIM_SELECT_TRACE) stamps %globaltimer at entry, when the search's results are visible (the programmatic
launch's wait), and after each of its steps.

  --variant dense     the dense select after MERGE=5 (csrc/kernels/similarity/select.cuh; thread 0 of every block,
                      four steps: the window and maxima, the bar, the queue, the rank and write)
  --variant filtered  the filtered select after MERGE=6 (select_filtered.cuh; lane 0 of each query's warp, five
                      steps: the bar words, every segment's count and first loads offered, the longer segments'
                      later loads offered, the kept entries merged, the answer written; and per query the entries
                      kept and the later loads' rounds)
  --variant warps     the same select after MERGE=7

For each shape the search + select pair runs ``--reps`` times, each after an L2 flush (the timer's protocol). Until
6a8e7ea the dense select also read the filtered search's candidate rows, and the results files up to then hold
``filtered`` rows too, with the dense select's steps. Per block the phase durations, and per run the select's span
past the search (the last block's end less the first block's wait return); medians over runs of the medians (and
maxima) over blocks, in us. Results: benchmarks/results/similarity_select_trace[_VARIANT][_TAG].json (dense: no
variant in the name); a table last. %globaltimer advanced in steps of ~0.26 us on the H100 and the H200 alike,
so a phase reads to about that. Two results files hold reverted selects as well: in
results/similarity_select_trace_h100.json the ``bulk`` rows are 4197698's (its window by bulk copies; its
``cp.async`` rows are the dense select as built now), in similarity_select_trace_h100_held.json the ``filtered``
rows are 41ccf11's (the held entries; its ``dense`` rows are as built now).

    python3 benchmarks/similarity_select_trace.py [--variant dense|filtered|warps] [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, kernel_variant, warm_up_gpu, write_result  # noqa: E402

from tunelab.paths import header_constant  # noqa: E402

D, K = 768, 10
SHAPES = [(1, 50_000), (100, 50_000), (1, 100_000)]
# (the variant's search MERGE, its select's steps after the wait, stamps a block writes: entry, the wait's return,
# one a step, and for the filtered select a word of counters; the counts read from the installed kernel headers, so
# that this script decodes what the kernel writes)
VARIANTS = {
    "dense": (5, ("step1_window_and_maxima", "step2_bar", "step3_queue", "step4_rank_and_write"),
              header_constant("kSelectTraceStamps", "similarity/select.cuh")),
    "filtered": (6, ("step1_bar_words", "step2_first_loads_offered", "step2_later_loads_offered",
                     "step2_kept_merged", "step3_written"),
                 header_constant("kFilterSelectTraceStamps", "similarity/select_filtered.cuh")),
}
VARIANTS["warps"] = (7,) + VARIANTS["filtered"][1:]
TRACE = {"TUNELAB_SIM_SELECT_TRACE": "1"}  # the select's diagnosis build


def one_run(prep, steps: tuple[str, ...], stamps: int) -> dict:
    """One flushed search + select; the select blocks' stamps decoded (us; a filtered select's eighth word: the
    entries it kept and its later loads' rounds)."""
    import numpy as np
    import torch

    from tunelab.timing import time_callable

    time_callable(prep, warmup=0, samples=1)
    torch.cuda.synchronize()
    rows = prep.ck[:, :2 * stamps].contiguous()  # the first entries of each query's row: 8-byte stamps
    raw = rows.view(torch.int64).cpu().numpy()  # [nq, stamps]
    ns = raw[:, :len(steps) + 2].astype(np.float64)
    us = (ns - ns[:, 1].min()) / 1e3  # from the first block's wait return
    out = {"entry_to_wait_us": us[:, 1] - us[:, 0]}
    for i, name in enumerate(steps):
        out[name] = us[:, i + 2] - us[:, i + 1]
    end = len(steps) + 1
    out["after_wait_us"] = us[:, end] - us[:, 1]
    span = float(us[:, end].max())  # the last block's end past the first wait return
    wait_spread = float(us[:, 1].max())
    counts = {}
    if stamps > len(steps) + 2:  # the filtered select's counters
        counts = {"kept": (raw[:, -1] & 0xffffffff).astype(np.float64),
                  "later_rounds": (raw[:, -1] >> 32).astype(np.float64)}
    return {"blocks": out, "counts": counts, "span_past_search_us": span, "wait_spread_us": wait_spread}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="flushed runs per shape")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="dense", help="which search and select")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    import numpy as np
    import torch

    from similarity_dense import Prepared
    from tunelab.ops import similarity as sim

    merge, steps, stamps = VARIANTS[args.variant]
    clock = warm_up_gpu()
    rows = []
    for nq, n in SHAPES:
        q, c = draw_search_inputs(nq, n, D, torch.float16, seed=n + nq)
        cfg = dict(sim.default_config(nq, K, "float16", D, n=65536), MERGE=merge)
        row = {"nq": nq, "n": n, "variants": {}}
        with kernel_variant(defines=TRACE):
            prep = Prepared(cfg, q, c)
        runs = [one_run(prep, steps, stamps) for _ in range(args.reps + 2)][2:]  # the first two warm up
        med = {k: float(np.median([np.median(r["blocks"][k]) for r in runs])) for k in runs[0]["blocks"]}
        worst = {k: float(np.median([np.max(r["blocks"][k]) for r in runs])) for k in runs[0]["blocks"]}
        v = row["variants"][args.variant] = {
            "config": prep.config, "runs": len(runs), "median_over_blocks_us": med, "max_over_blocks_us": worst,
            "span_past_search_us": float(np.median([r["span_past_search_us"] for r in runs])),
            "wait_spread_us": float(np.median([r["wait_spread_us"] for r in runs]))}
        counts = ""
        if runs[0]["counts"]:
            v["per_query_median"] = {k: float(np.median([np.median(r["counts"][k]) for r in runs]))
                                     for k in runs[0]["counts"]}
            v["per_query_max"] = {k: float(np.median([np.max(r["counts"][k]) for r in runs]))
                                  for k in runs[0]["counts"]}
            counts = "; " + ", ".join(f"{k} {v['per_query_median'][k]:.0f}/{v['per_query_max'][k]:.0f}"
                                      for k in v["per_query_median"])
        print(f"nq={nq:>4} N={n:>7}: span past search {v['span_past_search_us']:5.2f} us; per block "
              + ", ".join(f"{k.split('_')[0]}{'' if k.startswith('entry') else '_' + k.split('_')[1]} "
                          f"{med[k]:.2f}/{worst[k]:.2f}" for k in ("entry_to_wait_us",) + steps)
              + f" (median/max){counts}", flush=True)
        del prep
        rows.append(row)
        del q, c
        torch.cuda.empty_cache()
    name = "similarity_select_trace" + ("" if args.variant == "dense" else f"_{args.variant}")
    path = write_result(name, {"d": D, "k": K, "dtype": "fp16", "variant": args.variant, "sm_mhz_after_warmup": clock,
                               "rows": rows}, args.tag)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
