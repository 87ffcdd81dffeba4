#!/usr/bin/env bash
# properties.sh — runs the property tests (tests/test_properties.cpp, RapidCheck) with many cases:
#   scripts/properties.sh [CASES_PER_PROPERTY]      (default 20000)
# Uses the Release build in build/ (configured and built here if needed). A failure prints the
# RC_PARAMS="reproduce=..." line that replays the shrunk case.
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-20000}
bash scripts/install_deps.sh
[[ -f build/CMakeCache.txt ]] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)" --target test_properties
RC_PARAMS="max_success=$cases verbose_progress=0" ./build/tests/test_properties | grep -Ev '^ *[0-9.]+% - '
