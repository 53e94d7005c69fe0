#!/usr/bin/env bash
# Nsight Compute counters of the similarity search kernel for one shape of benchmarks/similarity_probe.py:
# speed of light, pipe utilization (the tensor pipe), and where L2's traffic comes from (SM reads, the link
# between the two L2 partitions, DRAM reads and writes). Each variant launches three searches (random, all-zero and
# all-NaN queries: see the probe's docstring); LAUNCHES limits how many are profiled.
#   bash benchmarks/ncu_similarity.sh TAG NQxN SET 'VARIANT;VARIANT' [LAUNCHES] [traffic|stalls|source] [MACRO=VALUE]
# writes ${OUT:-benchmarks/results}/ncu_similarity_TAG.txt, headed by the commit and the command. "stalls" reads,
# instead of L2's traffic, why the warps wait: every smsp__average_warps_issue_stalled_*_per_issue_active.ratio
# (cycles a warp spends stalled for that reason per issued instruction; no_instruction: instruction-cache misses)
# and the WarpStateStats section. "source" samples the warps' stalls per SASS instruction (SourceCounters) and
# writes them, as ncu's source page, to ncu_similarity_TAG_sass.csv next to the text, whose tail lists the 40
# instructions with the most samples (benchmarks/ncu_sass_top.py). MACRO=VALUE compiles the variants with it
# (similarity_probe.py --define).
set -uo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 TAG NQxN SET 'VARIANT;VARIANT' [LAUNCHES] [traffic|stalls|source] [MACRO=VALUE]" \
       "(SET: a --variants set of similarity_probe.py)" >&2
  exit 2
fi
tag=$1 shape=$2 set=$3 only=$4 launches=${5:-1} mode=${6:-traffic} define=${7:-}
if [ "$mode" != traffic ] && [ "$mode" != stalls ] && [ "$mode" != source ]; then
  echo "mode '$mode': expected traffic, stalls or source" >&2
  exit 2
fi
dir=${OUT:-benchmarks/results}
mkdir -p "$dir"
out="$dir/ncu_similarity_$tag.txt"
commit=${TUNELAB_GIT_COMMIT:-$(cat .tunelab-commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)}
metrics=lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_tex_lookup_hit.sum,lts__t_sectors_srcunit_ltcfabric.sum
metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum
metrics+=,lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed
metrics+=,lts__lts2xbar_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis)
if [ "$mode" = stalls ]; then
  metrics='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum'
  sections=(--section SpeedOfLight --section WarpStateStats)
fi
report=()
if [ "$mode" = source ]; then
  metrics=smsp__inst_executed.sum
  sections=(--section SpeedOfLight --section WarpStateStats --section SourceCounters)
  report=(-f -o "$dir/ncu_similarity_$tag")
fi
probe=(python3 benchmarks/similarity_probe.py --variants "$set" --only "$only" --ncu "$shape")
[ -n "$define" ] && probe+=(--define "$define")
cmd=(ncu --clock-control none "${sections[@]}" --metrics "$metrics" -k regex:similarity_topk --launch-count "$launches"
     "${report[@]}" "${probe[@]}")
{
  echo "# ${cmd[*]}"
  echo "# commit $commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  "${cmd[@]}" 2>&1
  if [ "$mode" = source ]; then
    ncu -i "$dir/ncu_similarity_$tag.ncu-rep" --page source --csv --print-source sass > "$dir/ncu_similarity_${tag}_sass.csv"
    python3 benchmarks/ncu_sass_top.py "$dir/ncu_similarity_${tag}_sass.csv" 40
  fi
} > "$out"
rc=$?
shown="similarity_topk<|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Tensor|highest-utilized"
shown+="|sectors|bytes_read|bytes_write|cycles_active|stalled|inst_executed|Warp Cycles"
grep -E "$shown" "$out" | cut -c1-150
exit $rc
