#!/usr/bin/env bash
# Quick start: install dependencies, build, and explain the built-in default
# (GPT-3 175B on 1024 A100s, dp=16 x pp=8 x tp=8). Extra arguments go to
# `meshplan explain`, e.g. scripts/quickstart.sh --json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target meshplan
exec build/release/cli/meshplan explain "$@"
