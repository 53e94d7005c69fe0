#!/usr/bin/env bash
# Install tunelab with its test extras the air-gapped way (README, "Air-gapped GPU clusters": steps 2 and 3): no package
# index, wheels from ./.whl or ./wheelhouse (scripts/build_wheelhouse.py), the C++ core built against the machine's
# own torch and toolkit (--no-build-isolation). pip's output is appended to LOG (default install.log); when the
# install fails its last 30 lines are printed and the exit status is 1.
#   bash scripts/install_offline.sh [LOG]
set -uo pipefail
log=${1:-install.log}
wheels=.whl; [ -d "$wheels" ] || wheels=wheelhouse
{
  python3 -m pip install -q --no-index --find-links "$wheels" scikit-build-core pybind11 &&
    python3 -m pip install -q --no-index --find-links "$wheels" --no-build-isolation ".[test]"
} >> "$log" 2>&1 || { tail -30 "$log"; exit 1; }
