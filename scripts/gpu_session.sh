#!/usr/bin/env bash
# One call on a GPU machine: install tunelab the air-gapped way (from ./.whl or ./wheelhouse), run the GPU
# test suite, then the benchmarks named as arguments. Logs and results go to $OUT (default ./gpu-out).
#   bash scripts/gpu_session.sh [benchmark.py ...]
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
# .git may not travel with the tree: results record this commit if the caller passes it
# (TUNELAB_GIT_COMMIT=$(git rev-parse HEAD) where the checkout is) or leaves it in ./.tunelab-commit.
if [ -z "${TUNELAB_GIT_COMMIT:-}" ] && [ -f .tunelab-commit ]; then export TUNELAB_GIT_COMMIT=$(cat .tunelab-commit); fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$OUT/install.log" 2>&1
bash "$(dirname "$0")/install_offline.sh" "$OUT/install.log" || exit 1
tail -3 "$OUT/install.log"
# (--durations: the slowest tests, since the whole suite takes about 10 minutes with its install, near a device
# call's limit: PYTEST_ARGS="-k 'not similarity'" and "tests/test_similarity_gpu.py" split it in two calls)
# eval: PYTEST_ARGS may carry quoted words, e.g. PYTEST_ARGS="tests/test_similarity_gpu.py -k 'nan or gram'"
eval "python3 -m pytest -m gpu -q -rs --durations=20 ${PYTEST_ARGS:-}" 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -${PYTEST_TAIL:-15}
for bench in "$@"; do
  echo "== $bench"
  # eval: an argument may carry quoted words, e.g. "benchmarks/similarity_probe.py --only 'default;pp BN=128,S=6'"
  eval "python3 $bench" 2>&1 | tee "$OUT/$(basename "${bench%% *}" .py).log" | tail -${BENCH_TAIL:-25}
done
