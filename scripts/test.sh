#!/usr/bin/env bash
# Installs dependencies, builds everything with warnings as errors, runs
# the whole test suite (ctest), then fuzzes every parser for a bounded time
# (scripts/fuzz.sh: 90 s in all, MESHPLAN_FUZZ_SECONDS to change it; its
# last line, "fuzz: PASS ..." or "fuzz: FAIL ...", is the verdict). This is
# what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci -j "$(nproc)"
scripts/fuzz.sh
