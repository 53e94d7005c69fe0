"""Where the dense select kernel's time goes after the dense search (fp16, d = 768, k = 10, inner product): its
diagnosis build (TUNELAB_SIM_SELECT_TRACE, csrc/kernels/similarity/select.cuh) stamps %globaltimer in thread 0 of
every block at entry, when the search's results are visible (the programmatic launch's wait), and after each of its
four steps.

For each shape the search (MERGE=5) + select pair runs ``--reps`` times, each after an L2 flush (the timer's
protocol). Until 6a8e7ea this select also read the filtered search's candidate rows, and the results files up to
then hold ``filtered`` rows too; those rows now have their own select (select_filtered.cuh), which has no stamps.
Per block the phase durations, and per run the select's span past the search (the last block's end less the first
block's wait return); medians over runs of the medians (and maxima) over blocks, in us. Results:
benchmarks/results/similarity_select_trace[_TAG].json; a table last. The H100's %globaltimer advanced in steps of
~0.26 us, so a phase reads to about that. Two results files hold reverted selects as well: in
results/similarity_select_trace_h100.json the ``bulk`` rows are 4197698's (its window by bulk copies; its ``cp.async``
rows are the dense select as built now), in similarity_select_trace_h100_held.json the ``filtered`` rows are 41ccf11's
(the held entries; its ``dense`` rows are as built now).

    python3 benchmarks/similarity_select_trace.py [--tag h100]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, kernel_variant, warm_up_gpu, write_result  # noqa: E402

D, K = 768, 10
SHAPES = [(1, 50_000), (100, 50_000), (1, 100_000)]
STEPS = ("step1_window_and_maxima", "step2_bar", "step3_queue", "step4_rank_and_write")
TRACE = {"TUNELAB_SIM_SELECT_TRACE": "1"}  # the select's diagnosis build


def one_run(prep) -> dict:
    """One flushed search + select; the select blocks' stamps decoded (us)."""
    import numpy as np
    import torch

    from tunelab.timing import time_callable

    time_callable(prep, warmup=0, samples=1)
    torch.cuda.synchronize()
    rows = prep.ck[:, :2 * 6].contiguous()  # the key matrix [nq][N rounded up to 4]: six 8-byte stamps a row
    ns = rows.view(torch.int64).cpu().numpy().astype(np.float64)  # [nq, 6]
    us = (ns - ns[:, 1].min()) / 1e3  # from the first block's wait return
    out = {"entry_to_wait_us": us[:, 1] - us[:, 0]}
    for i, name in enumerate(STEPS):
        out[name] = us[:, i + 2] - us[:, i + 1]
    out["after_wait_us"] = us[:, 5] - us[:, 1]
    span = float(us[:, 5].max())  # the last block's end past the first wait return
    wait_spread = float(us[:, 1].max())
    return {"blocks": out, "span_past_search_us": span, "wait_spread_us": wait_spread}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="flushed runs per shape")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    import numpy as np
    import torch

    from similarity_dense import Prepared
    from tunelab.ops import similarity as sim

    clock = warm_up_gpu()
    rows = []
    for nq, n in SHAPES:
        q, c = draw_search_inputs(nq, n, D, torch.float16, seed=n + nq)
        cfg = dict(sim.default_config(nq, K, "float16", D, n=65536), MERGE=sim.MERGE_DENSE)
        row = {"nq": nq, "n": n, "variants": {}}
        with kernel_variant(defines=TRACE):
            prep = Prepared(cfg, q, c)
        runs = [one_run(prep) for _ in range(args.reps + 2)][2:]  # the first two warm up
        med = {k: float(np.median([np.median(r["blocks"][k]) for r in runs])) for k in runs[0]["blocks"]}
        worst = {k: float(np.median([np.max(r["blocks"][k]) for r in runs])) for k in runs[0]["blocks"]}
        v = row["variants"]["dense"] = {
            "config": prep.config, "runs": len(runs), "median_over_blocks_us": med, "max_over_blocks_us": worst,
            "span_past_search_us": float(np.median([r["span_past_search_us"] for r in runs])),
            "wait_spread_us": float(np.median([r["wait_spread_us"] for r in runs]))}
        print(f"nq={nq:>4} N={n:>7}: span past search {v['span_past_search_us']:5.2f} us; per block "
              + ", ".join(f"{k.split('_')[0]} {med[k]:.2f}/{worst[k]:.2f}" for k in ("entry_to_wait_us",) + STEPS)
              + " (median/max)", flush=True)
        del prep
        rows.append(row)
        del q, c
        torch.cuda.empty_cache()
    path = write_result("similarity_select_trace", {"d": D, "k": K, "dtype": "fp16", "sm_mhz_after_warmup": clock,
                                                    "rows": rows}, args.tag)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
