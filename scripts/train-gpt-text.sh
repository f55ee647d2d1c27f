#!/usr/bin/env bash
# Trains gpt-byte-10m (presets/models/gpt-byte-10m.yaml: 10.84M parameters,
# nanoGPT's character-level shape on a byte vocabulary) on byte-level English
# text: the fortune cookies of Debian's `fortunes` package (2.6 MB), and prints
# the validation loss against log(256) = 5.545 nats, a model that knows nothing.
#
#   scripts/train-gpt-text.sh                 # 300 steps of 8 x 256 tokens
#   STEPS=600 OUT=run2 scripts/train-gpt-text.sh
#   MODEL=llama-byte-10m scripts/train-gpt-text.sh   # any byte-vocabulary model (scripts/train-llama-text.sh)
#
# Needs a release build (scripts/quickstart.sh makes one) and `fortunes`
# (scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
meshplan=${MESHPLAN:-build/release/cli/meshplan}
model=${MODEL:-gpt-byte-10m}
out=${OUT:-gpt-text-run}
steps=${STEPS:-300}
fortunes=/usr/share/games/fortunes
[[ -x $meshplan ]] || { echo "train-gpt-text: $meshplan not built (run scripts/quickstart.sh)" >&2; exit 2; }
[[ -d $fortunes ]] || { echo "train-gpt-text: $fortunes missing (apt-get install fortunes)" >&2; exit 2; }
mkdir -p "$out"
# The text files only: the folder also holds binary .dat indexes and .u8 links.
find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z | xargs -0 cat > "$out/corpus.txt"
"$meshplan" explain --model "$model" --cluster local-cpu --gpus 1 --mesh dp=1 \
  --micro-batch 8 --global-batch 8 --precision fp32 --emit-plan "$out/plan.json" > /dev/null
start=$(date +%s)
"$meshplan" train --plan "$out/plan.json" --data "text:$out/corpus.txt" --steps "$steps" \
  --lr 1e-3 --warmup 20 --eval-every 100 --eval-samples 128 --metrics "$out/metrics.jsonl"
end=$(date +%s)
python3 - "$out/metrics.jsonl" "$((end - start))" <<'PY'
import json, math, sys
evals = [r for r in map(json.loads, open(sys.argv[1])) if "eval_loss" in r]
print(f"\n{len(evals)} evaluations in {sys.argv[2]} s; log(256) = {math.log(256):.3f} nats")
for r in evals:
    print(f"  step {r['step']:>5}: validation loss {r['eval_loss']:.3f}")
PY
