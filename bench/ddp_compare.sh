#!/usr/bin/env bash
# Data-parallel training throughput: `meshplan train` on a dp=2 plan of
# presets/models/gpt-byte-10m.yaml (10.8M parameters, byte vocabulary, seq 256)
# under mpirun, against PyTorch DistributedDataParallel with the gloo backend
# (bench/torch_ddp_step.py) on the same model, global batch, threads per rank
# and number of steps (issue 6: report tokens/s of both and the ratio, target
# >= 1.0). Both sides: fp32, clip 1.0, AdamW; the median of the timed steps
# after the warm-up steps. Our side reads the metrics JSONL's step_s (world
# rank 0's wall time per optimizer step) and uses a text corpus (any text:
# /usr/share/common-licenses/* by default); PyTorch's side uses random tokens
# of the same shape (throughput only: the work does not depend on the values).
# Threads per rank: nproc / ranks unless --threads; OMP_NUM_THREADS and
# OPENBLAS_NUM_THREADS are set to it for both.
#
# On a machine that others load, the two sides can be run --repeat times,
# alternating (ours, PyTorch, ours, PyTorch, ...): one table row per run, and
# the ratio of the medians over the runs.
#
# Usage: bench/ddp_compare.sh [--build DIR] [--ranks N] [--global-batch B] [--steps S] [--warmup W] [--threads T]
#                             [--corpus FILE] [--repeat R]
#   --build   build directory holding cli/meshplan (default: build/release)
#   defaults: 2 ranks, global batch 16 (8 sequences per rank), 10 steps after 2 warm-up, 1 repeat
# Needs Debian's python3-torch (/usr/bin/python3; override with TORCH_PYTHON) and Open MPI.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build/release"
ranks=2
global_batch=16
steps=10
warmup=2
threads=""
corpus=""
repeat=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --global-batch) global_batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--ranks N] [--global-batch B] [--steps S] [--warmup W] [--threads T] [--corpus FILE] [--repeat R]" >&2
       exit 2 ;;
  esac
done
[ -n "$threads" ] || threads=$(( $(getconf _NPROCESSORS_ONLN) / ranks > 0 ? $(getconf _NPROCESSORS_ONLN) / ranks : 1 ))
python="${TORCH_PYTHON:-/usr/bin/python3}"
meshplan="$build/cli/meshplan"
[ -x "$meshplan" ] || { echo "ddp_compare: $meshplan not found; build the meshplan target" >&2; exit 1; }
"$python" -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  { echo "ddp_compare: $python cannot import torch with gloo (install python3-torch)" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "ddp_compare: mpirun not found (install openmpi-bin)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$corpus" ]; then
  corpus="$work/corpus.txt"
  cat /usr/share/common-licenses/* > "$corpus"
fi
micro_batch=$(( global_batch / ranks ))
"$meshplan" explain --model gpt-byte-10m --cluster local-cpu --gpus "$ranks" --mesh "dp=$ranks" --zero 0 \
  --micro-batch "$micro_batch" --global-batch "$global_batch" --emit-plan "$work/plan.json" > "$work/explain.out" 2>&1 ||
  [ -s "$work/plan.json" ] || { echo "ddp_compare: explain failed: $(tail -3 "$work/explain.out")" >&2; exit 1; }

export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
oversubscribe=()
[ "$ranks" -gt "$(getconf _NPROCESSORS_ONLN)" ] && oversubscribe=(--oversubscribe)

echo "gpt-byte-10m, dp=$ranks on $ranks ranks, global batch $global_batch x 256 tokens, $threads thread(s) per rank,"
echo "median of $steps steps after $warmup warm-up; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

total=$(( steps + warmup ))
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rows=""
ours_all="" torch_all=""
for run in $(seq 1 "$repeat"); do
  mpirun -np "$ranks" "${root[@]}" "${oversubscribe[@]}" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
    "$meshplan" train --plan "$work/plan.json" --data "text:$corpus" --steps "$total" --warmup 0 --clip 1.0 \
    --metrics "$work/ours.jsonl" > "$work/ours.out" 2>&1 ||
    { echo "ddp_compare: meshplan train failed:" >&2; tail -5 "$work/ours.out" >&2; exit 1; }
  ours_step=$(grep '"kind":"train"' "$work/ours.jsonl" | sed -n 's/.*"step_s":\([0-9.e+-]*\).*/\1/p' | tail -n "$steps" | median)
  rm -f "$work/ours.jsonl"
  ours_tps=$(awk -v s="$ours_step" -v b="$global_batch" 'BEGIN { printf "%.1f", b * 256 / s }')
  torch_out="$("$python" "$repo/bench/torch_ddp_step.py" --ranks "$ranks" --global-batch "$global_batch" --seq 256 \
    --threads "$threads" --steps "$steps" --warmup "$warmup" 2> "$work/torch.err")" ||
    { echo "ddp_compare: torch_ddp_step.py failed:" >&2; tail -5 "$work/torch.err" >&2; exit 1; }
  torch_tps=$(sed -n 's/^result: tokens_per_s=\([0-9.]*\).*/\1/p' <<<"$torch_out")
  torch_step=$(sed -n 's/^result: .* step_s=\([0-9.]*\) .*/\1/p' <<<"$torch_out")
  [ -n "$torch_tps" ] || { echo "ddp_compare: no result line from torch_ddp_step.py" >&2; exit 1; }
  ours_all+="$ours_tps"$'\n' torch_all+="$torch_tps"$'\n'
  rows+=$(printf "%4d %14.4f %14.1f %14.4f %14.1f %8.3f %18s" "$run" "$ours_step" "$ours_tps" "$torch_step" "$torch_tps" \
    "$(awk -v a="$ours_tps" -v b="$torch_tps" 'BEGIN { print a / b }')" "$(cut -d' ' -f1-3 /proc/loadavg)")$'\n'
done

echo
printf "%4s %14s %14s %14s %14s %8s %18s\n" "run" "ours_median_s" "ours_tok/s" "ddp_median_s" "ddp_tok/s" "ratio" "load_after"
printf "%s" "$rows"
ours_med=$(printf "%s" "$ours_all" | median)
torch_med=$(printf "%s" "$torch_all" | median)
awk -v a="$ours_med" -v b="$torch_med" -v r="$repeat" 'BEGIN {
  printf "tokens/s, median over %d run(s): meshplan train (MPI) %.1f, PyTorch DDP (gloo) %.1f\n", r, a, b
  printf "ratio meshplan / PyTorch DDP: %.3f   (target >= 1.0)\n", a / b }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
