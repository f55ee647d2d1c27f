#!/usr/bin/env bash
# Installs dependencies, builds everything with warnings as errors, and runs
# the whole test suite (ctest). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci -j "$(nproc)"
