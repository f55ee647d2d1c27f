#!/usr/bin/env bash
# Tokens/s of one GPT-2-small training step (forward + backward + clipping +
# AdamW, fp32): the executor (bench_gpt_step) against PyTorch
# (torch_gpt_step.py) with the same thread count, one after the other, and
# the ratio executor / PyTorch (issue "Executor core": target >= 1.0,
# stretch 1.3). Both read OMP_NUM_THREADS and OPENBLAS_NUM_THREADS, set here;
# both also set their thread count explicitly. The rest of the environment
# (OMP_WAIT_POLICY=passive, for instance) reaches both programs unchanged.
#
# Usage: bench/compare_gpt_step.sh [--build DIR] [--threads N] [--batch B] [--seq T] [--steps S]
#   --build    build directory holding bench/bench_gpt_step (default: build/release)
#   --threads  default: all cores (nproc)
#   --batch, --seq, --steps   default 2, 256, 3 (a step is a few seconds on 2 cores)
# Needs Debian's python3-torch (/usr/bin/python3; override with TORCH_PYTHON).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build/release"
cores="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # nproc itself obeys OMP_NUM_THREADS
threads="$cores"
batch=2
seq=256
steps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --seq) seq="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--threads N] [--batch B] [--seq T] [--steps S]" >&2; exit 2 ;;
  esac
done
python="${TORCH_PYTHON:-/usr/bin/python3}"
bench="$build/bench/bench_gpt_step"
[ -x "$bench" ] || { echo "compare_gpt_step: $bench not found; build the bench_gpt_step target" >&2; exit 1; }
"$python" -c "import torch" 2>/dev/null || { echo "compare_gpt_step: $python cannot import torch (install python3-torch)" >&2; exit 1; }

export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
args=(--batch "$batch" --seq "$seq" --threads "$threads" --steps "$steps")

echo "GPT-2 small (124M) training step, B=$batch T=$seq, $threads threads, median of $steps steps after 1 warm-up"
echo "environment: OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
ours_out="$("$bench" "${args[@]}")"
torch_out="$("$python" "$repo/bench/torch_gpt_step.py" "${args[@]}")"

value() { sed -n "s/^result: .*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
ours_tps="$(value tokens_per_s "$ours_out")"
torch_tps="$(value tokens_per_s "$torch_out")"
[ -n "$ours_tps" ] && [ -n "$torch_tps" ] || { echo "compare_gpt_step: no result line" >&2; exit 1; }

echo
grep -m1 '^impl' <<<"$ours_out"
grep '^meshplan' <<<"$ours_out"
grep '^pytorch' <<<"$torch_out"
echo
ours_min="$(value min_step_s "$ours_out")"
torch_min="$(value min_step_s "$torch_out")"
ours_cpu="$(value cpu_s "$ours_out")"
torch_cpu="$(value cpu_s "$torch_out")"
awk -v a="$ours_tps" -v b="$torch_tps" -v c="$ours_min" -v d="$torch_min" -v e="$ours_cpu" -v f="$torch_cpu" 'BEGIN {
  printf "ratio meshplan / pytorch, tokens/s at the median step:  %.3f   (target >= 1.0, stretch 1.3)\n", a / b
  printf "same ratio at each one'"'"'s fastest step:                  %.3f\n", d / c
  printf "same ratio in CPU seconds per step (pytorch / meshplan): %.3f   (spin-waiting counts as work)\n", f / e }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
