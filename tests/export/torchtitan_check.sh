#!/usr/bin/env bash
# `meshplan export --to torchtitan` fed to torchtitan's own config parser
# (issue 18): installs torchtitan 0.1.0 (the package only, and tyro) from
# PyPI into a throwaway virtual environment over Debian's python3-torch, then
# has tests/export/torchtitan_check.py parse the TOML of five plans (FSDP,
# DDP, HSDP with tp and cp, interleaved and GPipe pipelines, each recompute
# mode) with torchtitan's ConfigManager and check every key and value.
#
#   torchtitan_check.sh MESHPLAN WORK_DIR
#
# Exit 77 (skipped, with the reason) when /usr/bin/python3 has no torch or
# the packages cannot be installed (no network).
set -euo pipefail
meshplan=$1 work=$2
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
venv="$work/venv"
. "$(dirname "$0")/throwaway_venv.sh"
throwaway_venv "${MESHPLAN_TORCH_PYTHON:-/usr/bin/python3}" "$venv" "torchtitan's config module imports it"
# --no-deps: torchtitan's other requirements (datasets, torchdata, ...) are its training loop's, not its parser's.
pip_or_skip "$venv" "torchtitan 0.1.0" --no-deps torchtitan==0.1.0
pip_or_skip "$venv" tyro tyro

# name | model | gpus | mesh | explain flags
cases=(
  "fsdp8-full|llama3-8b|8|fsdp=8|--recompute full --global-batch 32"
  "dp4-ddp|gpt2-124m|4|dp=4|--zero 0 --recompute none --global-batch 32"
  "hsdp-tp-cp|llama3-8b|16|dp=2,fsdp=2,cp=2,tp=2|--zero 0 --recompute selective --global-batch 16"
  "pp-interleaved|llama3-8b|16|dp=2,pp=2,tp=4|--schedule interleaved:2 --zero 2 --global-batch 64"
  "pp-gpipe|gpt2-350m|4|pp=4|--schedule gpipe --zero 0 --micro-batch 2 --global-batch 16"
)
for case in "${cases[@]}"; do
  IFS='|' read -r name model gpus mesh flags <<<"$case"
  # shellcheck disable=SC2086 # flags is a list of flags
  "$meshplan" explain --model "$model" --cluster dgx-h100 --gpus "$gpus" --mesh "$mesh" $flags \
    --emit-plan "$work/$name.json" >"$work/$name.explain.txt" 2>&1
  "$meshplan" export --plan "$work/$name.json" --to torchtitan -o "$work/$name.toml" 2>"$work/$name.export.txt"
  (cd "$work" && "$venv/bin/python" "$source_dir/tests/export/torchtitan_check.py" "$work/$name.toml")
done
echo "PASS: ${#cases[@]} torchtitan job configs parsed by torchtitan 0.1.0's ConfigManager, every key a JobConfig field"
