#!/usr/bin/env bash
# Measures the GPU of this machine for meshplan's validation (docs/validation.md,
# "Hopper, single GPU"): real training steps of the model presets, then
# device figures in the format `meshplan calibrate --from` reads. Needs only
# Python with PyTorch and PyYAML (no meshplan build): run it where the GPU is,
# bring the two files back, and compare with `scripts/gpu/compare_steps.py`.
#   scripts/gpu/measure.sh OUTDIR [DEADLINE_SECONDS]
set -euo pipefail
out=${1:?usage: scripts/gpu/measure.sh OUTDIR [DEADLINE_SECONDS]}
deadline=${2:-300}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv | tee "$out/nvidia-smi.csv"
start=$(date +%s)
python3 "$here/measure_steps.py" "$out/steps.jsonl" --deadline "$deadline" 2>&1 | tee "$out/steps.log"
echo "steps: $(( $(date +%s) - start )) s"
python3 "$here/measure_device.py" "$out/device.jsonl" 2>&1 | tee "$out/device.log"
# What dropout does to fused attention, and the loss eager and compiled: rows
# calibrate --from reads (attention_dropout, cross_entropy_compiled), appended.
PYTHONPATH="$here" python3 "$here/measure_dropout.py" "$out/dropout.jsonl" 2>&1 | tee -a "$out/device.log"
PYTHONPATH="$here" python3 "$here/measure_loss.py" "$out/loss.jsonl" 2>&1 | tee -a "$out/device.log"
cat "$out/dropout.jsonl" "$out/loss.jsonl" >> "$out/device.jsonl"
echo "total: $(( $(date +%s) - start )) s"
