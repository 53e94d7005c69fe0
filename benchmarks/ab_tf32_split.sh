#!/usr/bin/env bash
# A/B on one GPU of the fp32 -> tf32 split in the 3xTF32 main loop: the working tree's kernels (after: Veltkamp's
# split, split_tf32 in csrc/kernels/similarity/mma_tile.cuh) against d49cba4's (before: two cvt.rna.tf32), swapped
# in the installed package between runs (the kernel cache hashes the headers, so each run compiles its own).
# Runs benchmarks/similarity_fp32_compute.py and its ncu profile for each, then the similarity GPU tests on after.
# The before headers come from git (d49cba4) or, where .git did not travel (the device tool), from ab_before/
# (git show d49cba4:csrc/kernels/similarity/mma_tile.cuh > ab_before/mma_tile.cuh, the same for ptx.cuh).
#   OUT=... bash benchmarks/ab_tf32_split.sh      (logs, ncu reports and results in $OUT)
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export TUNELAB_GIT_COMMIT=${TUNELAB_GIT_COMMIT:-$(cat .tunelab-commit 2>/dev/null || git rev-parse HEAD)} PYTHONUNBUFFERED=1
before=ab_before
if [ ! -f $before/mma_tile.cuh ]; then
  before=$(mktemp -d)
  for f in mma_tile.cuh ptx.cuh; do git show d49cba4:csrc/kernels/similarity/$f > $before/$f || exit 1; done
fi
bash scripts/install_offline.sh "$OUT/install.log" || exit 1
K=$(python3 -c "import tunelab.paths as p; print(p.kernels_dir())")/similarity
NCU="ncu --cache-control none --clock-control none --set full -k regex:similarity_topk --launch-skip 10 --launch-count 1"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
keep=$(mktemp -d)
cp $K/mma_tile.cuh $K/ptx.cuh "$keep"/ || exit 1
# the installed package must not keep the before headers, whatever ends this script (a warm machine keeps them)
trap 'cp "$keep"/mma_tile.cuh "$keep"/ptx.cuh $K/' EXIT
for side in after before; do
  if [ $side = before ]; then cp $before/mma_tile.cuh $before/ptx.cuh $K/ || exit 1; fi
  echo "== $side"
  python3 benchmarks/similarity_fp32_compute.py --tag "${side}" 2>&1 | tee "$OUT/$side.log" | grep -v wrote
  $NCU python3 benchmarks/similarity_fp32_compute.py --ncu > "$OUT/ncu_$side.txt" 2>&1
  grep -E "Duration|Executed Instructions  |Issued Warp Per|Warp Cycles Per Issued" "$OUT/ncu_$side.txt"
done
cp "$keep"/mma_tile.cuh "$keep"/ptx.cuh $K/ || exit 1
echo "== pytest -m gpu tests/test_similarity_gpu.py (after)"
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_similarity_gpu.py 2>&1 | tail -3 | tee "$OUT/pytest_similarity.txt"
