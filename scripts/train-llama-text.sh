#!/usr/bin/env bash
# Trains llama-byte-10m (presets/models/llama-byte-10m.yaml: 9.64M parameters,
# the Llama family's block — grouped-query attention, rotary positions,
# SwiGLU, RMSNorm, untied output layer, no biases — at gpt-byte-10m's shape)
# on the same byte-level English text as scripts/train-gpt-text.sh, with the
# same steps, batch and learning rate, and prints the validation loss against
# log(256) = 5.545 nats. Its loss curve is in docs/executor.md.
#
#   scripts/train-llama-text.sh               # 300 steps of 8 x 256 tokens
#   STEPS=600 OUT=run2 scripts/train-llama-text.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=llama-byte-10m OUT=${OUT:-llama-text-run} exec scripts/train-gpt-text.sh
