#!/usr/bin/env bash
# Nsight Compute's view of one call of each op at its headline shape, through `tunelab profile` (tunelab/profile.py):
# per kernel the time under ncu, SM / DRAM / L2 % of peak, achieved occupancy, the occupancy limiter, what bounds it
# and the top warp stall reasons, with every counter ncu collected and the environment fingerprint.
#   bash benchmarks/profile_ops.sh [TAG]      (about a minute on an H200; needs ncu: see `tunelab profile --help`)
# writes ${OUT:-benchmarks/results}/profile_{similarity_100x50000x768x10,attention_16x16x512x64,gram_8192x256}TAG.json
# and prints the three tables.
set -euo pipefail
tag=${1:-}
dir=${OUT:-benchmarks/results}
mkdir -p "$dir"
tunelab profile --op similarity --shape 100,50000,768,10 --dtype fp16 --out "$dir/profile_similarity_100x50000x768x10$tag.json"
tunelab profile --op attention --shape 16,16,512,64 --dtype fp16 --out "$dir/profile_attention_16x16x512x64$tag.json"
tunelab profile --op gram --shape 8192,256 --dtype complex64 --out "$dir/profile_gram_8192x256$tag.json"
