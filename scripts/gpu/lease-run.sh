#!/usr/bin/env bash
# Issue 16's GPU checks in one call of a lent GPU machine: scripts/gpu/cuda-checks.sh with full timing
# (every CUDA test program, the parallel matrix with every rank on the GPU, the PyTorch reference,
# train's default backend, calibrate --backend cuda, our kernels against PyTorch's, and gpt-bench.sh
# priced on that calibration, with each op's GPU time), then the logs packed into one archive, since
# such a machine sends back at most 8 files: OUT/gpu-checks.tgz, OUT/console.log, OUT/table.md and
# OUT/gpt-bench.md, the last two also printed. Exit status: cuda-checks.sh's (0 all passed, 77 no GPU,
# 1 a failure), 124 when LEASE_TIMEOUT (seconds, default 540) ran out first; the archive is written
# either way.
#
# usage: [LEASE_TIMEOUT=S] [CUDA_CHECKS_TIMING=full|quick|none] [DEBS=...] scripts/gpu/lease-run.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: scripts/gpu/lease-run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
start=$(date +%s)
CUDA_CHECKS_TIMING=${CUDA_CHECKS_TIMING:-full} GPT_BENCH_OP_TIMES=${GPT_BENCH_OP_TIMES:-1} \
  timeout "${LEASE_TIMEOUT:-540}" scripts/gpu/cuda-checks.sh "$work/checks" > "$work/console.log" 2>&1
status=$?
echo "lease-run: cuda-checks.sh exit $status after $(( $(date +%s) - start )) s" >> "$work/console.log"
(cd "$work" && find . -type f -size -4M ! -name corpus.txt -print0 | tar czf "$out/gpu-checks.tgz" --null -T -) ||
  echo "lease-run: could not pack the logs" >> "$work/console.log"
cp "$work/console.log" "$out/"
for f in checks/table.md checks/gpt-bench/gpt-bench.md; do
  [ -f "$work/$f" ] && cp "$work/$f" "$out/" && { echo; cat "$work/$f"; }
done
tail -n 1 "$work/console.log"
exit "$status"
