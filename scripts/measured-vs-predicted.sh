#!/usr/bin/env bash
# Measured against predicted step time on this machine (docs/measured-vs-predicted.md):
#  1. `mpirun -np 2 meshplan calibrate` into a temporary presets folder (never
#     the user's: MESHPLAN_USER_PRESETS points there for every later command),
#     so local-cpu carries this machine's GEMM rate, bandwidth and MPI links;
#  2. for each plan below: `meshplan explain --cluster local-cpu --emit-plan`,
#     then `meshplan train` (under `mpirun -np 2` for 2-rank plans) for STEPS
#     steps with no thread variables set (each rank runs hardware threads /
#     ranks BLAS threads), and its run report (<stem>.report.json);
#  3. prints a Markdown table: plan, ranks, threads per rank, predicted step
#     (cost model on the calibrated local-cpu, each device scaled to the
#     rank's cores), measured median step (first step left out), error,
#     and the CPU share (the lowest rank's CPU time / (wall x threads): below
#     1 the ranks did not have their cores to themselves).
#
# usage: scripts/measured-vs-predicted.sh [BUILD_DIR] [WORK_DIR] [STEPS] [--quick-calibrate]
#   BUILD_DIR defaults to build/release (needs its cli/meshplan), WORK_DIR to
#   a new temporary folder, STEPS to 8. The table goes to stdout, progress to stderr.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
work=${2:-$(mktemp -d /tmp/measured-vs-predicted.XXXXXX)}
steps=${3:-8}
quick=${4:-}
meshplan=$build/cli/meshplan
[ -x "$meshplan" ] || { echo "no $meshplan: build it first (cmake --build $build --target meshplan)" >&2; exit 2; }
mkdir -p "$work" && cd "$work" || exit 2
mpirun=(mpirun)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
unset OPENBLAS_NUM_THREADS OMP_NUM_THREADS
export MESHPLAN_USER_PRESETS=$work/presets
say() { echo "measured-vs-predicted: $*" >&2; }

calibrate_flags=(--out "$MESHPLAN_USER_PRESETS")
[ "$quick" = "--quick-calibrate" ] && calibrate_flags+=(--quick)
say "calibrating into $MESHPLAN_USER_PRESETS (mpirun -np 2)"
"${mpirun[@]}" -np 2 "$meshplan" calibrate "${calibrate_flags[@]}" > calibrate.out 2> calibrate.err ||
  { cat calibrate.err >&2; exit 1; }

corpus=$root/README.md
# name | ranks | explain flags | data | environment (thread counts; empty: the train command's default)
plans=(
  "mlp-fashion mb 64|1|--model mlp-fashion --mesh dp=1 --micro-batch 64 --global-batch 64|fashion-mnist"
  "mlp-fashion mb 512|1|--model mlp-fashion --mesh dp=1 --micro-batch 512 --global-batch 512|fashion-mnist"
  "mlp-fashion mb 512, 1 thread|1|--model mlp-fashion --mesh dp=1 --micro-batch 512 --global-batch 512|fashion-mnist|OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"
  "gpt-byte-10m seq 128 mb 4|1|--model gpt-byte-10m --seq 128 --mesh dp=1 --micro-batch 4 --global-batch 4|text:$corpus"
  "gpt-byte-10m seq 128 mb 4, 1 thread|1|--model gpt-byte-10m --seq 128 --mesh dp=1 --micro-batch 4 --global-batch 4|text:$corpus|OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"
  "gpt-byte-10m seq 128 dp=2|2|--model gpt-byte-10m --seq 128 --mesh dp=2 --micro-batch 4 --global-batch 8 --zero 0|text:$corpus"
  "gpt-byte-10m seq 256 mb 2, 1 thread|1|--model gpt-byte-10m --seq 256 --mesh dp=1 --micro-batch 2 --global-batch 2|text:$corpus|OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"
  "gpt-byte-10m seq 128 dp=2 ZeRO-1|2|--model gpt-byte-10m --seq 128 --mesh dp=2 --micro-batch 4 --global-batch 8 --zero 1|text:$corpus"
  "gpt-byte-10m seq 128 dp=2 ZeRO-2|2|--model gpt-byte-10m --seq 128 --mesh dp=2 --micro-batch 4 --global-batch 8 --zero 2|text:$corpus"
  "gpt-byte-10m seq 128 fsdp=2|2|--model gpt-byte-10m --seq 128 --mesh fsdp=2 --micro-batch 4 --global-batch 8|text:$corpus"
  "gpt-byte-10m seq 128 tp=2|2|--model gpt-byte-10m --seq 128 --mesh tp=2 --micro-batch 4 --global-batch 4|text:$corpus"
  "gpt-byte-10m seq 128 pp=2 GPipe, 4 micro-batches|2|--model gpt-byte-10m --seq 128 --mesh pp=2 --micro-batch 1 --global-batch 4 --schedule gpipe|text:$corpus"
  "gpt-byte-10m seq 128 pp=2 1F1B, 4 micro-batches|2|--model gpt-byte-10m --seq 128 --mesh pp=2 --micro-batch 1 --global-batch 4 --schedule 1f1b|text:$corpus"
)

rows=()
i=0
for entry in "${plans[@]}"; do
  IFS='|' read -r name ranks flags data environment <<< "$entry"
  i=$((i + 1))
  stem=plan$i
  # shellcheck disable=SC2086
  "$meshplan" explain $flags --cluster local-cpu --gpus "$ranks" --recompute none --precision fp32 \
    --emit-plan "$stem.json" > "$stem.explain" 2>&1
  [ -s "$stem.json" ] || { say "explain $name failed: $(tail -3 "$stem.explain")"; continue; }
  say "[$i/${#plans[@]}] $name on $ranks rank(s), $steps steps"
  if [ "$ranks" -gt 1 ]; then
    "${mpirun[@]}" -np "$ranks" "$meshplan" train --plan "$stem.json" --data "$data" --steps "$steps" \
      --metrics "$stem.jsonl" > "$stem.out" 2>&1
  else
    # shellcheck disable=SC2086
    env $environment "$meshplan" train --plan "$stem.json" --data "$data" --steps "$steps" --metrics "$stem.jsonl" \
      > "$stem.out" 2>&1
  fi || { say "train $name failed: $(tail -5 "$stem.out")"; continue; }
  rows+=("$name|$stem.report.json")
done

python3 - "$work" "${rows[@]}" <<'PY'
import json, os, sys
work, rows = sys.argv[1], sys.argv[2:]
print("| plan | ranks | threads/rank | predicted step (s) | measured median (s) | error | within 15% | CPU share | predicted compute / comm / bubble / optimizer (s) | load avg |")
print("|---|---|---|---|---|---|---|---|---|---|")
errors = []
for row in rows:
    name, path = row.split("|")
    r = json.load(open(os.path.join(work, path)))
    p = r["prediction"]
    measured = max(x["measured_median_step_s"] for x in r["ranks"])  # the slowest rank sets the step
    share = min(x["cpu_share"] for x in r["ranks"])
    error = measured / p["step_s"] - 1
    print(f"| {name} | {len(r['ranks'])} | {r['threads']['per_rank']} | {p['step_s']:.4f} | {measured:.4f} | "
          f"{error:+.0%} | {'yes' if abs(error) <= 0.15 else 'no'} | {share:.2f} | {p['compute_s']:.4f} / "
          f"{p['communication_exposed_s']:.4f} / {p['bubble_s']:.4f} / {p['optimizer_s']:.4f} | "
          f"{r['load_average_1min']:.2f} |")
    errors.append(error)
if errors:
    within = sum(1 for e in errors if abs(e) <= 0.15)
    print(f"\n{within} of {len(errors)} plans within 15%; mean |error| {sum(abs(e) for e in errors) / len(errors):.1%}, "
          f"worst {max(errors, key=abs):+.1%}.")
PY
say "work folder: $work (plan files, run reports, calibration: calibrate.out)"
