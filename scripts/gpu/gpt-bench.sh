#!/usr/bin/env bash
# The GPT executor on one GPU against PyTorch on the same card, one run
# (issue 16's benchmark): `meshplan train --backend cuda --precision bf16`
# on GPT-2 124M, 350M and 1.5B (micro-batch 8, sequence 1024, one
# micro-batch per step, byte-level text from this repository's sources)
# beside PyTorch eager and torch.compile on the same models and batch
# (scripts/gpu/measure_steps.py: autocast bf16, flash SDPA, fused AdamW;
# dropout 0, as ours has none). Prints and writes OUT/gpt-bench.md: tokens/s
# of each (median step after the first), ours / eager and ours / compile,
# our MFU (the metrics' mfu against the plan device's bf16 peak) and our
# measured step over the run report's prediction (the plan priced on its
# own cluster, dgx-h100 unless GPT_BENCH_CLUSTER names another).
#
# A run that fails (out of memory: our fp32 attention keeps B x heads x T x
# T probabilities per layer in fp32; with bf16 the flash attention keeps O(T)) is a
# row saying so, not a stop. Needs a built tree (scripts/gpu/cuda-checks.sh
# builds one) and Python with PyTorch and PyYAML.
#
# usage: [GPT_BENCH_STEPS=N] [GPT_BENCH_TORCH=0] [GPT_BENCH_OP_TIMES=1] [GPT_BENCH_CLUSTER=NAME]
#        [GPT_BENCH_CALIBRATED=DIR]
#        scripts/gpu/gpt-bench.sh BUILD_DIR OUT_DIR [MODEL ...]
#        (default models: gpt2-124m gpt2-350m gpt2-1.5b; GPT_BENCH_TORCH=0
#        times ours alone; GPT_BENCH_OP_TIMES=1 adds a 3-step run of each with
#        MESHPLAN_CUDA_OP_TIMES=1, OUT/MODEL.op-times.log)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: gpt-bench.sh BUILD_DIR OUT_DIR [MODEL ...]}
out=${2:?usage: gpt-bench.sh BUILD_DIR OUT_DIR [MODEL ...]}
shift 2
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(gpt2-124m gpt2-350m gpt2-1.5b)
meshplan="$build/cli/meshplan"
[ -x "$meshplan" ] || { echo "gpt-bench: no $meshplan (build the tree first)"; exit 1; }
cluster=${GPT_BENCH_CLUSTER:-dgx-h100}
# GPT_BENCH_CALIBRATED=DIR: the folder `calibrate --backend cuda --out DIR` wrote (DIR/devices/NAME.yaml):
# the plans are made for a one-GPU cluster of that device (NAME-node, dgx-h100's links) in a user presets
# folder of their own, so the run report prices each step with this card's measured figures (issue 16:
# explain against the measured step after calibrate --backend cuda).
if [ -n "${GPT_BENCH_CALIBRATED:-}" ]; then
  device_file=$(ls "$GPT_BENCH_CALIBRATED"/devices/*.yaml 2> /dev/null | head -1)
  [ -n "$device_file" ] || { echo "gpt-bench: no devices/*.yaml in GPT_BENCH_CALIBRATED=$GPT_BENCH_CALIBRATED"; exit 1; }
  device=$(basename "$device_file" .yaml)
  cluster="$device-node"
  export MESHPLAN_USER_PRESETS="$out/user-presets"
  mkdir -p "$MESHPLAN_USER_PRESETS/devices" "$MESHPLAN_USER_PRESETS/clusters"
  cp "$device_file" "$MESHPLAN_USER_PRESETS/devices/"
  sed -e "s/^name: .*/name: $cluster/" -e "s/^device: .*/device: $device/" \
    -e "s/^devices_per_node: .*/devices_per_node: 1/" \
    -e "s|^source: .*|source: \"$device as calibrate --backend cuda measured it; links as dgx-h100's (unused by one GPU)\"|" \
    presets/clusters/dgx-h100.yaml > "$MESHPLAN_USER_PRESETS/clusters/$cluster.yaml"
  echo "gpt-bench: plans priced on $cluster (device $device from $device_file)"
fi
micro=8
seq=1024
steps=${GPT_BENCH_STEPS:-6}
mkdir -p "$out"
corpus="$out/corpus.txt"
git ls-files '*.cpp' '*.hpp' '*.md' | xargs cat > "$corpus" 2> /dev/null

for m in "${models[@]}"; do
  "$meshplan" explain --model "$m" --cluster "$cluster" --gpus 1 --mesh dp=1 --micro-batch "$micro" \
    --global-batch "$micro" --precision bf16 --emit-plan "$out/$m.plan.json" > "$out/$m.explain.log" 2>&1 ||
    { echo "gpt-bench: explain $m failed: $(tail -2 "$out/$m.explain.log")"; continue; }
  rm -f "$out/$m.metrics.jsonl"
  start=$(date +%s)
  timeout 150 "$meshplan" train --plan "$out/$m.plan.json" --backend cuda --precision bf16 --steps "$steps" \
    --data "text:$corpus" --metrics "$out/$m.metrics.jsonl" --report "$out/$m.report.json" --log-every 1 \
    > "$out/$m.train.log" 2>&1
  echo "gpt-bench: meshplan train $m: exit $? in $(( $(date +%s) - start )) s"
  if [ "${GPT_BENCH_OP_TIMES:-0}" = 1 ]; then  # a second run of 3 steps with each op's GPU time (cuda_op_times.hpp)
    MESHPLAN_CUDA_OP_TIMES=1 timeout 150 "$meshplan" train --plan "$out/$m.plan.json" --backend cuda --precision bf16 \
      --steps 3 --data "text:$corpus" --log-every 1 > "$out/$m.op-times.log" 2>&1
    echo "gpt-bench: op times of $m (exit $?):"
    grep -A40 "^GPU op times" "$out/$m.op-times.log"
  fi
done

python3 - "$out" "$micro" "$seq" "${models[@]}" > "$out/cases.json" <<'PY'
import json, sys
out, micro, seq, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
print(json.dumps([[m, seq, micro, "none"] for m in models]))
PY
rm -f "$out/torch.jsonl"
start=$(date +%s)
[ "${GPT_BENCH_TORCH:-1}" = 0 ] && echo "gpt-bench: GPT_BENCH_TORCH=0, PyTorch not measured" ||
PYTHONUNBUFFERED=1 timeout "${GPT_BENCH_TORCH_TIMEOUT:-300}" python3 scripts/gpu/measure_steps.py "$out/torch.jsonl" --cases "$out/cases.json" \
  --dropout 0 --modes eager,compile --deadline 200 > "$out/torch-steps.log" 2>&1 ||
  echo "gpt-bench: measure_steps.py exit $? ($(tail -2 "$out/torch-steps.log"))"
echo "gpt-bench: PyTorch took $(( $(date +%s) - start )) s"

GPT_BENCH_PRICED_ON="$cluster" python3 - "$out" "$micro" "$seq" "${models[@]}" <<'PY' | tee "$out/gpt-bench.md"
import json, os, statistics, sys
out, micro, seq, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
tokens = micro * seq

def read_jsonl(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows

torch = {}
for r in read_jsonl(os.path.join(out, "torch.jsonl")):
    if r.get("micro_batch") == micro and r.get("seq") == seq:
        torch[(r["model"], r["mode"])] = r

def fmt(x, spec):
    return "-" if x is None else format(x, spec)

priced_on = os.environ.get("GPT_BENCH_PRICED_ON", "")
print(f"| model | ours tokens/s | eager tokens/s | compile tokens/s | ours/eager | ours/compile | our MFU | measured/predicted step ({priced_on}) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for m in models:
    steps = [r for r in read_jsonl(os.path.join(out, f"{m}.metrics.jsonl")) if r.get("kind") == "train"]
    ours = mfu = ratio = None
    note = ""
    if len(steps) >= 2:
        later = steps[1:]
        step_s = statistics.median(r["step_s"] for r in later)
        ours = tokens / step_s
        mfus = [r["mfu"] for r in later if r.get("mfu") is not None]
        mfu = statistics.median(mfus) if mfus else None
        report_path = os.path.join(out, f"{m}.report.json")
        if os.path.exists(report_path):
            report = json.load(open(report_path))
            ranks = report.get("ranks", [])
            if ranks and ranks[0].get("measured_over_predicted"):
                ratio = ranks[0]["measured_over_predicted"]
    else:
        log = os.path.join(out, f"{m}.train.log")
        tail = open(log).read().strip().splitlines()[-1:] if os.path.exists(log) else ["no log"]
        note = " (ours failed: " + (tail[0][:120] if tail else "") + ")"
    rates = {}
    for mode in ("eager", "compile"):
        r = torch.get((m, mode))
        rates[mode] = tokens / r["step_s"] if r and r.get("step_s") else None
    def over(a, b):
        return None if a is None or b is None else a / b
    print(f"| {m}{note} | {fmt(ours, '.0f')} | {fmt(rates['eager'], '.0f')} | {fmt(rates['compile'], '.0f')} | "
          f"{fmt(over(ours, rates['eager']), '.2f')} | {fmt(over(ours, rates['compile']), '.2f')} | "
          f"{fmt(None if mfu is None else 100 * mfu, '.1f')}{'%' if mfu is not None else ''} | {fmt(ratio, '.2f')} |")
PY
