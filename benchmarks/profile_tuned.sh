#!/usr/bin/env bash
# Why a tuned config wins, in hardware counters: a short tuning run of the 100 x 50K fp16 search on this GPU, then
# `tunelab profile --result` on its results file (what `tunelab tune ... --profile` does in one command), which
# profiles the winner, the family's default config and the strongest baseline (torch.topk(Q @ C.T)) as the tuner
# timed them (tunelab/profile.py, profile_tuned). TRIALS (default 32) is the study's length: the default config, 20
# Latin-hypercube seeds, then the sampler. About four minutes on an H200; needs ncu (see `tunelab profile --help`).
#   bash benchmarks/profile_tuned.sh [TAG] [TRIALS]
# writes ${OUT:-benchmarks/results}/tune_similarity_100x50000x768x10_profiledTAG.json (the tuning result) and
# profile_tuned_similarity_100x50000x768x10TAG.json (every counter of each arm, the timer's medians and the
# environment fingerprint), and prints the tuner's report and the arms' table.
set -euo pipefail
tag=${1:-}
trials=${2:-32}
dir=${OUT:-benchmarks/results}
mkdir -p "$dir"
result="$dir/tune_similarity_100x50000x768x10_profiled$tag.json"
tunelab tune similarity --nq 100 --n 50000 --d 768 --k 10 --dtype fp16 --trials "$trials" --storage memory --no-store \
  --quiet --results "$result"
tunelab profile --result "$result" --out "$dir/profile_tuned_similarity_100x50000x768x10$tag.json"
