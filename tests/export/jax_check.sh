#!/usr/bin/env bash
# `meshplan export --to jax` checked with JAX itself (issue 18): installs JAX
# for CPU from PyPI into a throwaway virtual environment, then for dp, fsdp,
# tp, ZeRO-1, context-parallel and 2-D and 3-D meshes of a GPT-2-style and a
# Llama-style model (grouped-query attention, SwiGLU, a vocabulary the mesh
# does not divide) exports the plan and has
# tests/export/jax_check.py compare the device JAX places each block of each
# array on (8 host-platform devices) with meshplan's ShardingSpec. One module
# also runs as a script.
#
#   jax_check.sh MESHPLAN SHARDING_BLOCKS SOURCE_DIR WORK_DIR
#
# Exit 77 (skipped, with the reason) when no virtual environment can be made
# or JAX cannot be installed (no network).
set -euo pipefail
meshplan=$1 blocks_tool=$2 source_dir=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
venv="$work/venv"
. "$(dirname "$0")/throwaway_venv.sh"
throwaway_venv "${MESHPLAN_JAX_PYTHON:-python3}" "$venv"
pip_or_skip "$venv" JAX jax
echo "JAX $("$venv/bin/python" -c 'import jax; print(jax.__version__)') installed in a throwaway environment"
export XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu

gpt="$source_dir/tests/data/gpt-tiny-ref.yaml"
llama="$source_dir/tests/data/llama-tiny-ref.yaml"
# name | model | mesh | extra explain flags
cases=(
  "gpt-dp8|$gpt|dp=8|"
  "gpt-fsdp8|$gpt|fsdp=8|"
  "gpt-tp4|$gpt|tp=4|"
  "gpt-dp2-tp4-sp|$gpt|dp=2,tp=4|--sequence-parallel"
  "gpt-fsdp2-tp4|$gpt|fsdp=2,tp=4|"
  "gpt-dp4-zero1-tp2|$gpt|dp=4,tp=2|--zero 1"
  "llama-fsdp8|$llama|fsdp=8|"
  "llama-tp4|$llama|tp=4|"
  "llama-dp2-tp2|$llama|dp=2,tp=2|"
  "llama-fsdp4-tp2|$llama|fsdp=4,tp=2|"
  "llama-dp2-cp2-tp2-zero2|$llama|dp=2,cp=2,tp=2|--zero 2"
)
for case in "${cases[@]}"; do
  IFS='|' read -r name model mesh extra <<<"$case"
  world=1
  for part in ${mesh//,/ }; do world=$((world * ${part#*=})); done
  # shellcheck disable=SC2086 # extra is a list of flags
  "$meshplan" explain --model "$model" --cluster dgx-a100 --gpus "$world" --mesh "$mesh" --micro-batch 1 \
    --global-batch $((world * 2)) $extra --emit-plan "$work/$name.json" >"$work/$name.explain.txt"
  "$meshplan" export --plan "$work/$name.json" --to jax -o "$work/${name//-/_}.py" 2>"$work/$name.export.txt"
  "$blocks_tool" "$work/$name.json" >"$work/$name.blocks.json"
  "$venv/bin/python" "$source_dir/tests/export/jax_check.py" --module "$work/${name//-/_}.py" \
    --blocks "$work/$name.blocks.json"
done
# The module runs as a script too (it prints the mesh and the parameters' specs).
"$venv/bin/python" "$work/llama_fsdp4_tp2.py" >"$work/llama-fsdp4-tp2.run.txt"
grep -q "^layer1.mlp.w_gate .* P('fsdp', 'tp')$" "$work/llama-fsdp4-tp2.run.txt"
# A vocabulary the mesh does not divide is padded, with a warning.
grep -q "vocabulary padded from 67 to 68" "$work/llama-tp4.export.txt"
# A pipeline-parallel plan is refused, naming the field.
"$meshplan" explain --model "$gpt" --cluster dgx-a100 --gpus 2 --mesh pp=2 --global-batch 4 \
  --emit-plan "$work/gpt-pp2.json" >/dev/null
if "$meshplan" export --plan "$work/gpt-pp2.json" --to jax 2>"$work/gpt-pp2.export.txt"; then
  echo "FAIL: a pp=2 plan was exported to JAX"
  exit 1
fi
grep -q "mesh.pp" "$work/gpt-pp2.export.txt"
echo "PASS: ${#cases[@]} plans exported to JAX place every block where meshplan's ShardingSpec does"
