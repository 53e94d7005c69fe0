"""Where the dense search's time goes at N = 50K, nq = 100 (fp16, k = 10): the op's kernels in a loop of calls, timed
by CUPTI through torch.profiler (median durations of the search and the select kernel and the gaps between them;
the profiler's own launch overhead widens the host-side gap, so only the search-to-select gap reads true), and a
mode that only runs the loop, for Nsight Compute:

    python3 benchmarks/similarity_select_probe.py            # -> results/similarity_select_timeline.json
    ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \\
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \\
        -k regex:similarity_select --launch-skip 30 --launch-count 1 \\
        python3 benchmarks/similarity_select_probe.py ncu   # results/ncu_similarity_select_h100.txt
    # warp samples per SASS instruction, the key matrix left in L2 as in the op (results/ncu_similarity_select_full_h200.txt):
    ncu --clock-control none --cache-control none --set full -k regex:similarity_select --launch-skip 30 \\
        --launch-count 1 -o sel python3 benchmarks/similarity_select_probe.py ncu
    ncu --import sel.ncu-rep --page details; ncu --import sel.ncu-rep --page source --print-source sass --csv

Since 23c0f56 the select kernel is a programmatic dependent launch (sm_90): it starts while the search still runs
and waits for it inside, so its span includes that wait and the search-to-select gap is negative. The figure to
compare across versions is ``search_start_to_select_end_us``, one call's two kernels end to end.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import draw_search_inputs, write_result  # noqa: E402

NQ, N, D, K = 100, 50_000, 768, 10
WARM, PROFILED, SKIP = 30, 50, 5  # calls before, calls profiled, profiled calls left out of the medians


def kernel_spans(prof, torch) -> tuple[list, list]:
    """(start, end) in us of each search and each select launch the profiler saw, in launch order."""
    spans = {"topk": [], "select": []}
    for e in sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start):
        for kind, out in spans.items():
            if f"similarity_{kind}" in e.name:
                out.append((e.time_range.start, e.time_range.end))
    return spans["topk"], spans["select"]


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tunelab.ops import similarity as sim

    q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=3)
    for _ in range(WARM):
        sim.similarity_search(q, c, K)
    torch.cuda.synchronize()
    if sys.argv[1:] == ["ncu"]:  # a few more calls for the profiler to pick from (--launch-skip WARM)
        for _ in range(4):
            sim.similarity_search(q, c, K)
        torch.cuda.synchronize()
        return 0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED):
            sim.similarity_search(q, c, K)
        torch.cuda.synchronize()
    search, select = (s[SKIP:] for s in kernel_spans(prof, torch))
    out = {"nq": NQ, "n": N, "d": D, "k": K, "dtype": "float16", "calls": len(search),
           "search_us": statistics.median(b - a for a, b in search),
           "select_us": statistics.median(b - a for a, b in select),
           "gap_search_to_select_us": statistics.median(s[0] - a[1] for a, s in zip(search, select)),
           "gap_select_to_next_search_us": statistics.median(a[0] - s[1] for s, a in zip(select, search[1:])),
           "search_start_to_select_end_us": statistics.median(s[1] - a[0] for a, s in zip(search, select))}
    path = write_result("similarity_select_timeline", out)
    print(f"wrote {path}")
    print("  ".join(f"{key} {value:.2f}" for key, value in out.items() if key.endswith("_us")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
