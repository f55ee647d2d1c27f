#!/usr/bin/env bash
# Installs dependencies, builds everything with warnings as errors, fuzzes
# every parser for a bounded time (scripts/fuzz.sh: 90 s in all,
# MESHPLAN_FUZZ_SECONDS to change it; its last line, "fuzz: PASS ..." or
# "fuzz: FAIL ...", is its verdict), then runs the whole test suite (ctest,
# last, so that its summary closes the output). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset ci
cmake --build --preset ci
scripts/fuzz.sh
ctest --preset ci -j "$(nproc)"
