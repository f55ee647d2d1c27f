#!/usr/bin/env bash
# The CUDA checks of issue 16 in one go, for a machine with an NVIDIA GPU,
# the CUDA toolkit, CMake, Ninja, a C++ compiler and meshplan's non-GUI
# Debian dependencies (yaml-cpp, Boost, CLI11, GoogleTest, nlohmann-json,
# OpenBLAS; the lent H100/H200 machines have them): configures the release
# preset without the studio, builds the CUDA kernel tests, records the GPU,
# runs the tests and prints a table of test, result and time, which it also
# writes to OUT/table.md. Exit status: the tests' (77: no usable GPU, and why).
#
# Not yet here (issue 16): the GPT step against the CPU executor, NCCL, and
# building on a machine without the Debian packages from .deb files fetched
# beforehand.
#
# usage: scripts/gpu/cuda-checks.sh [OUT_DIR]   (default: gpu-checks)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-checks}
mkdir -p "$out"
build=build/gpu-checks
fail() { echo "cuda-checks: $*" >&2; exit 1; }

command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "no nvcc on PATH or under /usr/local/cuda/bin"
cmake --preset release -B "$build" -DMESHPLAN_STUDIO=OFF -DMESHPLAN_PLOT=OFF -DMESHPLAN_BENCH=OFF \
  > "$out/configure.log" 2>&1 || fail "configure failed: $(tail -5 "$out/configure.log")"
grep -q "GPU kernels built" "$out/configure.log" || fail "CMake did not find the CUDA toolkit: $(grep -i cuda "$out/configure.log")"
cmake --build "$build" --target cuda_kernel_tests -j "$(nproc)" > "$out/build.log" 2>&1 ||
  fail "build failed: $(tail -20 "$out/build.log")"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
else
  echo "none (no nvidia-smi)" > "$out/gpu.txt"
fi

"$build/tests/cuda_kernel_tests" --gtest_output="json:$out/cuda_kernel_tests.json" > "$out/cuda_kernel_tests.log" 2>&1
status=$?
cat "$out/cuda_kernel_tests.log"
{
  echo "GPU: $(cat "$out/gpu.txt" 2>/dev/null)"
  echo
  echo "| test | result | time (s) |"
  echo "|---|---|---:|"
  if [ -s "$out/cuda_kernel_tests.json" ]; then
    python3 - "$out/cuda_kernel_tests.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for suite in report.get("testsuites", []):
    for t in suite.get("testsuite", []):
        result = "failed" if t.get("failures") else "passed"
        print(f"| {suite['name']}.{t['name']} | {result} | {float(t.get('time', '0s').rstrip('s')):.3f} |")
PY
  else
    echo "| cuda_kernel_tests | exit $status: $(head -1 "$out/cuda_kernel_tests.log") | |"
  fi
} > "$out/table.md"
cat "$out/table.md"
exit "$status"
