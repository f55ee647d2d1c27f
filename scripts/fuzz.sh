#!/usr/bin/env bash
# Fuzzes every parser a user can feed (docs/fuzzing.md): builds the libFuzzer
# targets in build/fuzz (the `fuzz` preset: clang, ASan + UBSan) when needed,
# runs each, one after the other, for an equal share of a bounded time,
# starting from its committed corpus fuzz/corpus/<target>, prints a table
# (target, execs, execs/s, corpus size, crashes) and a last line CI can read,
# and exits 1 when a target crashed, timed out or ran out of memory (the
# input that did it is kept in build/fuzz/artifacts/, with the command that
# replays it).
#
#   MESHPLAN_FUZZ_SECONDS  seconds for all targets together (default 90: CI)
#   MESHPLAN_FUZZ_TARGETS  the targets to run (default: every target built)
#
# Inputs that reach new code are added to build/fuzz/corpus-new/<target>,
# never to the committed corpus; docs/fuzzing.md says how to merge them in.
set -euo pipefail
cd "$(dirname "$0")/.."

total_s=${MESHPLAN_FUZZ_SECONDS:-90}
build=build/fuzz

if [ ! -f "$build/CMakeCache.txt" ]; then
  if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache; fi
  cmake --preset fuzz >/dev/null
fi
cmake --build --preset fuzz >/dev/null

targets=${MESHPLAN_FUZZ_TARGETS:-}
if [ -z "$targets" ]; then
  for source in fuzz/fuzz_*.cpp; do
    name=$(basename "$source" .cpp)
    [ -x "$build/fuzz/$name" ] && targets="$targets $name"
  done
fi
set -- $targets
count=$#
[ "$count" -gt 0 ] || { echo "fuzz: FAIL no fuzz targets built" >&2; exit 1; }
per_target_s=$(( total_s / count ))
[ "$per_target_s" -ge 1 ] || per_target_s=1

# The dictionary and the largest input of each target (a plan file is ~6 KB).
dictionary() {
  case "$1" in
    fuzz_model_yaml|fuzz_device_yaml|fuzz_cluster_yaml) echo fuzz/dict/yaml.dict ;;
    fuzz_plan_file|fuzz_checkpoint_manifest|fuzz_device_measurements|fuzz_hf_config|fuzz_plot_inputs) echo fuzz/dict/json.dict ;;
    *) echo "fuzz/dict/$1.dict" ;;
  esac
}
max_len() {
  case "$1" in
    fuzz_plan_file|fuzz_checkpoint_manifest) echo 16384 ;;
    fuzz_device_measurements) echo 32768 ;;  # a whole measurement file is 25-29 KB
    fuzz_mesh) echo 256 ;;
    *) echo 8192 ;;
  esac
}

mkdir -p "$build/artifacts" "$build/logs"
failed=0
all_execs=0
start=$(date +%s)
printf '%-26s %12s %9s %14s %8s\n' target execs execs/s corpus crashes
for target in "$@"; do
  mkdir -p "$build/corpus-new/$target"
  log="$build/logs/$target.log"
  rm -f "$build/artifacts/$target"-*
  status=0
  # -timeout: one input may take 10 s (a hang is a finding); -rss_limit_mb: 2 GiB (an OOM is a finding).
  timeout $(( per_target_s + 60 )) "$build/fuzz/$target" \
    -max_total_time="$per_target_s" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$target")" \
    -dict="$(dictionary "$target")" -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" \
    "$build/corpus-new/$target" "fuzz/corpus/$target" >"$log" 2>&1 || status=$?
  # A target that crashes while loading its corpus prints none of these.
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$( (grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" || true) | tail -1 | cut -d' ' -f2)
  crashes=$(find "$build/artifacts" -name "$target-*" | wc -l)
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi  # killed without an artifact
  printf '%-26s %12s %9s %14s %8s\n' "$target" "${execs:-?}" "${rate:-?}" "${corpus:-?}" "$crashes"
  all_execs=$(( all_execs + ${execs:-0} ))
  if [ "$crashes" -ne 0 ]; then
    failed=$(( failed + 1 ))
    grep -E 'ERROR|runtime error|fuzz check failed|SUMMARY' "$log" | head -5 | sed 's/^/    /' || true
    for artifact in "$build/artifacts/$target"-*; do
      [ -e "$artifact" ] && echo "    replay: $build/fuzz/$target $artifact"
    done
    echo "    log: $log"
  fi
done
elapsed=$(( $(date +%s) - start ))
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAIL $failed of $count targets crashed ($all_execs execs in ${elapsed} s)"
  exit 1
fi
echo "fuzz: PASS $count targets, $all_execs execs in ${elapsed} s, 0 crashes"
