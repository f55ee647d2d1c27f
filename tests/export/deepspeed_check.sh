#!/usr/bin/env bash
# `meshplan export --to deepspeed` fed to DeepSpeed's own config parser
# (issue 18): installs DeepSpeed from PyPI into a throwaway virtual
# environment that sees Debian's PyTorch (python3-torch; DeepSpeed imports
# torch, and PyPI's torch wheels are gigabytes), then for ZeRO 0-3 and
# fp32/bf16/fp16 plans has tests/export/deepspeed_check.py check that
# DeepSpeedConfig accepts the JSON (its ZeRO schema and batch assertion) and
# parses the plan's stage, precision and batch.
#
#   deepspeed_check.sh MESHPLAN SOURCE_DIR WORK_DIR
#
# Exit 77 (skipped, with the reason) when /usr/bin/python3 has no torch or
# DeepSpeed cannot be installed (no network).
set -euo pipefail
meshplan=$1 source_dir=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
venv="$work/venv"
. "$(dirname "$0")/throwaway_venv.sh"
throwaway_venv "${MESHPLAN_TORCH_PYTHON:-/usr/bin/python3}" "$venv" "DeepSpeed's config parser imports it"
# 0.16.0: a release that installs against Debian bookworm's PyTorch 1.13 (DeepSpeed builds no ops at install).
pip_or_skip "$venv" "DeepSpeed 0.16.0" --no-build-isolation deepspeed==0.16.0

# name | mesh | explain flags | data-parallel ranks | ZeRO stage DeepSpeed must parse | precision
cases=(
  "dp8-zero2-bf16|dp=8|--micro-batch 4 --global-batch 256 --zero 2 --precision bf16|8|2|bf16"
  "dp4-zero1-fp16|dp=4|--micro-batch 2 --global-batch 64 --zero 1 --precision fp16|4|1|fp16"
  "dp2-zero0-fp32|dp=2|--micro-batch 8 --global-batch 16 --zero 0 --precision fp32|2|0|fp32"
  "fsdp8-bf16|fsdp=8|--micro-batch 1 --global-batch 32 --precision bf16|8|3|bf16"
)
for case in "${cases[@]}"; do
  IFS='|' read -r name mesh flags dp stage precision <<<"$case"
  # shellcheck disable=SC2086 # flags is a list of flags
  "$meshplan" explain --model gpt2-124m --cluster dgx-a100 --gpus "$dp" --mesh "$mesh" --recompute none $flags \
    --emit-plan "$work/$name.json" >"$work/$name.explain.txt" 2>&1
  "$meshplan" export --plan "$work/$name.json" --to deepspeed -o "$work/$name.ds.json" 2>"$work/$name.export.txt"
  "$venv/bin/python" "$source_dir/tests/export/deepspeed_check.py" "$work/$name.ds.json" "$dp" "$stage" "$precision" \
    2>"$work/$name.check.txt" || { cat "$work/$name.check.txt"; exit 1; }
done
echo "PASS: ${#cases[@]} DeepSpeed configs accepted and parsed as planned by DeepSpeed 0.16.0's DeepSpeedConfig"
