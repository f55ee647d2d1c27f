#!/usr/bin/env bash
# Quick start: install dependencies, build, and explain GPT-3 175B on 1024
# A100s with dp=16 x pp=8 x tp=8 and global batch 1536, all named here (without
# --mesh, explain would use the plan the search ranks first). Extra arguments
# go to `meshplan explain`, e.g. scripts/quickstart.sh --json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target meshplan
exec build/release/cli/meshplan explain --model gpt3-175b --cluster dgx-a100 --gpus 1024 \
  --mesh dp=16,pp=8,tp=8 --global-batch 1536 "$@"
