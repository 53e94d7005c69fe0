"""Where the dense search's time goes at N = 50K, nq = 100 (fp16, k = 10): the op's kernels in a loop of calls, timed
by CUPTI through torch.profiler (median durations of the search and the select kernel and the gaps between them;
the profiler's own launch overhead widens the host-side gap, so only the first gap reads true), and a mode that
only runs the loop, for Nsight Compute:

    python3 benchmarks/similarity_select_probe.py            # -> $OUT/select_timeline.json
    ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
        -k regex:similarity_select --launch-skip 30 --launch-count 1 \
        python3 benchmarks/similarity_select_probe.py ncu   # results/ncu_similarity_select_h100.txt
    # warp samples per SASS instruction, the key matrix left in L2 as in the op (results/ncu_similarity_select_full_h200.txt):
    ncu --clock-control none --cache-control none --set full -k regex:similarity_select --launch-skip 30 \
        --launch-count 1 -o sel python3 benchmarks/similarity_select_probe.py ncu
    ncu --import sel.ncu-rep --page details; ncu --import sel.ncu-rep --page source --print-source sass --csv
"""
import sys, os, json
import torch
sys.path.insert(0, "benchmarks")
from _common import draw_search_inputs
from tunelab.ops import similarity as sim
NQ, N, D, K = 100, 50_000, 768, 10
q, c = draw_search_inputs(NQ, N, D, torch.float16, seed=3)
mode = sys.argv[1] if len(sys.argv) > 1 else "timeline"
for _ in range(30):
    sim.similarity_search(q, c, K)
torch.cuda.synchronize()
if mode == "ncu":
    for _ in range(4):
        sim.similarity_search(q, c, K)
    torch.cuda.synchronize()
    raise SystemExit(0)
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(50):
        sim.similarity_search(q, c, K)
    torch.cuda.synchronize()
evs = sorted([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "similarity" in e.name],
             key=lambda e: e.time_range.start)
rows = [(e.name[:40], e.time_range.start, e.time_range.end) for e in evs]
search = [r for r in rows if "topk" in r[0]]
sel = [r for r in rows if "select" in r[0]]
import statistics as st
ds = [r[2] - r[1] for r in search[5:]]
dl = [r[2] - r[1] for r in sel[5:]]
gap1 = [s[1] - a[2] for a, s in zip(search[5:], sel[5:])]
gap2 = [a[1] - s[2] for s, a in zip(sel[5:-1], search[6:])]
out = {"search_us": st.median(ds), "select_us": st.median(dl), "gap_search_to_select_us": st.median(gap1),
       "gap_select_to_next_search_us": st.median(gap2), "names": sorted({r[0] for r in rows})}
print(json.dumps(out, indent=1))
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "select_timeline.json"), "w"), indent=1)
