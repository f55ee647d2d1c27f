#!/usr/bin/env bash
# The CUDA checks of issue 16 in one go, for a machine with an NVIDIA GPU,
# the CUDA toolkit, CMake, Ninja, a C++ compiler and meshplan's non-GUI
# Debian dependencies (yaml-cpp, Boost, CLI11, GoogleTest, nlohmann-json,
# OpenBLAS; the lent H100/H200 machines have them): configures the release
# preset without the studio, builds the CUDA test programs (the kernels
# against the CPU kernels, the cuBLASLt GEMMs, the CUDA backend, the NCCL
# communicator with one rank, calibrate's measurements, and the GPT
# executor's training steps on the GPU against the CPU's), records the GPU,
# runs each program and prints a table of program, test, result and time,
# which it also writes to OUT/table.md. Then it times our kernels against
# PyTorch's on the same card (OUT/vs-torch.md; CUDA_CHECKS_TIMING below).
# Exit status: 0 when every program passed, 77 when none could use a GPU
# (and why), else 1.
#
# Without those Debian packages (no network there): fetch them as .deb files
# beforehand on a Debian 12 machine (scripts/gpu/debs.sh fetch, into
# third_party/debs/), copy that folder along, and this script unpacks them
# into build/deps-prefix and builds against them (MESHPLAN_DEPS_PREFIX, with
# LD_LIBRARY_PATH for their libraries). DEBS=DIR names another folder;
# DEBS=none ignores it.
#
# With full timing it also runs scripts/gpu/gpt-bench.sh: `meshplan train
# --backend cuda` on GPT-2 124M/350M/1.5B against PyTorch eager and
# torch.compile (tokens/s, MFU, measured over predicted step, priced with
# the device preset calibrate measured in the same run).
#
# It also runs the parallel matrix with 1, 2, 4 and 8 ranks sharing this GPU
# (collectives staged through host memory over MPI), when mpirun is here,
# and `meshplan train` with its default --backend auto on a plan made for
# h100-sxm (it must train on the GPU).
#
# Not yet here (issue 16): NCCL across several GPUs (the NCCL test runs a
# world of one rank).
#
# usage: [DEBS=DIR|none] [CUDA_CHECKS_TIMING=full|quick|none] [CUDA_CHECKS_ONLY="NAME ..."] [CUDA_CHECKS_MATRIX="PLAN:RANKS ..."]
#        scripts/gpu/cuda-checks.sh [OUT_DIR]
#        (default OUT_DIR: gpu-checks; on an H200 the whole script took 106 s, docs/gpu-checks.md)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-checks}
mkdir -p "$out"
build=build/gpu-checks
fail() { echo "cuda-checks: $*" >&2; exit 1; }

deps=()
debs=${DEBS:-third_party/debs}
if [ "$debs" != none ] && compgen -G "$debs/*.deb" > /dev/null; then
  prefix=$(scripts/gpu/debs.sh unpack "$debs" build/deps-prefix) || fail "could not unpack the .deb files in $debs"
  arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  export LD_LIBRARY_PATH="$prefix/usr/lib/$arch:$prefix/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  deps=(-DMESHPLAN_DEPS_PREFIX="$prefix")
  build=build/gpu-checks-debs  # apart: a cache configured against the system would keep its package paths
  echo "cuda-checks: dependencies from $debs ($(ls "$debs"/*.deb | wc -l) packages, unpacked in $prefix)"
elif [ "${DEBS:-}" != "" ] && [ "$debs" != none ]; then
  fail "DEBS=$debs holds no .deb files"
fi

command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "no nvcc on PATH or under /usr/local/cuda/bin"
# NCCL outside the toolkit: PyTorch's pip copy (site-packages/nvidia/nccl) as the fallback.
nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) || nccl_root=""
cmake --preset release -B "$build" -DMESHPLAN_STUDIO=OFF -DMESHPLAN_PLOT=OFF -DMESHPLAN_BENCH=OFF "${deps[@]}" \
  ${nccl_root:+-DMESHPLAN_NCCL_ROOT="$nccl_root"} \
  > "$out/configure.log" 2>&1 || fail "configure failed: $(tail -5 "$out/configure.log")"
grep -q "GPU kernels built" "$out/configure.log" || fail "CMake did not find the CUDA toolkit: $(grep -i cuda "$out/configure.log")"
programs=(cuda_kernel_tests cuda_gemm_tests cuda_backend_tests cuda_calibrate_tests cuda_gpt_tests)
if grep -q "the NCCL communicator is built" "$out/configure.log"; then
  programs+=(nccl_communicator_tests)
else
  echo "cuda-checks: NCCL not found, nccl_communicator_tests not built: $(grep -i nccl "$out/configure.log")"
fi
# CUDA_CHECKS_ONLY="NAME ...": only these of the programs above and of parallel_matrix_cuda,
# gpt_torch_reference_cuda and train_backend_auto (a rerun of what failed, when GPU time is short).
only=${CUDA_CHECKS_ONLY:-}
wants() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
if [ -n "$only" ]; then
  chosen=()
  for program in "${programs[@]}"; do wants "$program" && chosen+=("$program"); done
  programs=("${chosen[@]}")
  echo "cuda-checks: CUDA_CHECKS_ONLY: ${programs[*]} $(for x in parallel_matrix_cuda gpt_torch_reference_cuda train_backend_auto; do wants $x && printf '%s ' $x; done)"
fi
: > "$out/build.log"
[ ${#programs[@]} = 0 ] || cmake --build "$build" --target "${programs[@]}" -j "$(nproc)" > "$out/build.log" 2>&1 ||
  fail "build failed: $(tail -20 "$out/build.log")"
# The GPU executor's GPT against PyTorch (tests/reference/gpt_torch_reference.py with the dump built for
# the GPU), when this Python has PyTorch: a row of the table like the programs'.
# The parallel matrix with every rank on this GPU (tests/parallel/parallel_matrix.cpp --device cuda), when mpirun is here.
matrix=none
if command -v mpirun > /dev/null && wants parallel_matrix_cuda; then
  cmake --build "$build" --target parallel_matrix_cuda -j "$(nproc)" >> "$out/build.log" 2>&1 && matrix=ready ||
    echo "cuda-checks: parallel_matrix_cuda did not build: $(tail -5 "$out/build.log")"
fi
reference=none
if ! wants gpt_torch_reference_cuda; then
  :
elif python3 -c 'import torch, numpy' 2> /dev/null; then
  cmake --build "$build" --target gpt_reference_dump_cuda -j "$(nproc)" >> "$out/build.log" 2>&1 && reference=ready ||
    echo "cuda-checks: gpt_reference_dump_cuda did not build: $(tail -5 "$out/build.log")"
else
  echo "cuda-checks: python3 has no PyTorch and NumPy: the GPU GPT's PyTorch reference does not run"
fi
timing=${CUDA_CHECKS_TIMING:-full}
if [ "$timing" != none ]; then  # meshplan and meshplan-calibrate-cuda, for the timing below
  cmake --build "$build" --target meshplan -j "$(nproc)" >> "$out/build.log" 2>&1 ||
    { echo "cuda-checks: meshplan did not build, no timing: $(tail -5 "$out/build.log")"; timing=none; }
fi
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
else
  echo "none (no nvidia-smi)" > "$out/gpu.txt"
fi

statuses=()
for program in "${programs[@]}"; do
  timeout 300 "$build/tests/$program" --gtest_output="json:$out/$program.json" > "$out/$program.log" 2>&1
  statuses+=("$?")
  cat "$out/$program.log"
done
if [ "$matrix" = ready ]; then
  # Every knob of the CPU matrix (tests/CMakeLists.txt) with every rank on this GPU: ZeRO 1/2/3, fsdp,
  # HSDP, tp with and without sequence parallelism, each pipeline schedule, the 4- and 8-rank hybrids and
  # the Llama layers under tp. CUDA_CHECKS_MATRIX="PLAN:RANKS ..." runs others.
  for case in ${CUDA_CHECKS_MATRIX:-one:1 dp2:2 dp2-zero1:2 dp2-zero2:2 dp2-zero3:2 fsdp2:2 dp2-fsdp2:4 tp2:2 tp2-sp:2 \
      pp2-gpipe:2 pp2-1f1b:2 pp2-interleaved:2 pp2-zb-h1:2 dp2-tp2:4 fsdp2-tp2:4 tp2-pp2:4 \
      dp2-zero1-tp2-sp-pp2-interleaved:8 fsdp2-tp2-sp-pp2-zb-h1:8 llama-dp2:2 llama-tp4-sp:4 llama-fsdp2-tp4:8}; do
    plan=${case%%:*}
    ranks=${case##*:}
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
      timeout 60 mpirun --oversubscribe -np "$ranks" "$build/tests/parallel_matrix_cuda" "$plan" --device cuda \
      > "$out/parallel_matrix_cuda_$plan.log" 2>&1
    statuses+=("$?")
    programs+=("parallel_matrix_cuda_$plan")
    grep -E "^device|SKIPPED|DIVERGED|differs" "$out/parallel_matrix_cuda_$plan.log" | head -3
  done
fi
if [ "$reference" = ready ]; then
  timeout 200 python3 tests/reference/gpt_torch_reference.py --dump-program "$build/tests/gpt_reference_dump_cuda" \
    --model tests/data/gpt-tiny-ref.yaml --work-dir "$out/torch-reference-cuda" > "$out/gpt_torch_reference_cuda.log" 2>&1
  statuses+=("$?")
  programs+=(gpt_torch_reference_cuda)
  tail -n 30 "$out/gpt_torch_reference_cuda.log"
fi
# `meshplan train` with its default --backend auto: a tiny GPT planned for h100-sxm trains on the GPU
# (the session says "training on cuda:N"); without a usable GPU it trains on the CPU and says why (77 here).
if [ "$timing" != none ] && wants train_backend_auto; then
  log="$out/train_backend_auto.log"
  "$build/cli/meshplan" explain --model tests/parallel/gpt-tiny-bytes.yaml --cluster dgx-h100 --gpus 1 --mesh dp=1 \
    --micro-batch 2 --global-batch 8 --precision fp32 --emit-plan "$out/auto-gpt.json" > "$log" 2>&1 &&
    timeout 120 "$build/cli/meshplan" train --plan "$out/auto-gpt.json" --data text:README.md --steps 2 >> "$log" 2>&1
  s=$?
  if [ "$s" = 0 ] && grep -q "training on cuda" "$log"; then
    echo "PASSED: --backend auto trained on the GPU" >> "$log"
  elif [ "$s" = 0 ] && grep -qE "no NVIDIA GPU is visible|no usable GPU|without the CUDA toolkit" "$log"; then
    s=77
    echo "SKIPPED: $(grep -m1 '^note:' "$log")" >> "$log"
  else
    [ "$s" = 0 ] && s=1
    echo "FAILED: --backend auto did not train on the GPU: $(tail -2 "$log" | tr '\n' ' ')" >> "$log"
  fi
  statuses+=("$s")
  programs+=(train_backend_auto)
  tail -1 "$log"
fi
{
  echo "GPU: $(cat "$out/gpu.txt" 2>/dev/null)"
  echo
  echo "| program | test | result | time (s) |"
  echo "|---|---|---|---:|"
  for i in "${!programs[@]}"; do
    program=${programs[$i]}
    if [ -s "$out/$program.json" ]; then
      python3 - "$program" "$out/$program.json" <<'PY'
import json, sys
program, path = sys.argv[1], sys.argv[2]
report = json.load(open(path))
for suite in report.get("testsuites", []):
    for t in suite.get("testsuite", []):
        result = "failed" if t.get("failures") else "passed"
        print(f"| {program} | {suite['name']}.{t['name']} | {result} | {float(t.get('time', '0s').rstrip('s')):.3f} |")
PY
    else
      line=$(grep -E '^(PASSED|FAILED|SKIPPED|device )' "$out/$program.log" | tail -1)
      echo "| $program | | exit ${statuses[$i]}: ${line:-$(head -1 "$out/$program.log")} | |"
    fi
  done
} > "$out/table.md"
cat "$out/table.md"
status=0
skipped=0
for s in "${statuses[@]}"; do
  if [ "$s" = 77 ]; then skipped=$((skipped + 1)); elif [ "$s" != 0 ]; then status=1; fi
done
if [ "$status" = 0 ] && [ "$skipped" = "${#statuses[@]}" ]; then status=77; fi
if [ "$status" = 0 ] && [ "$skipped" != 0 ]; then status=1; fi  # some ran and some could not: not a pass
# Timing, one run on this card (CUDA_CHECKS_TIMING=full, the default; quick; none):
# `calibrate --backend cuda` measures our kernels (cuBLASLt GEMMs, flash
# attention, LayerNorm/GELU/residual, cross-entropy, AdamW) and writes a
# device preset; measure_device.py measures PyTorch's on the same shapes; the
# table compares them. It runs when any program could use the GPU, and its
# failure does not change the status.
if [ "$timing" != none ] && [ "$skipped" != "${#statuses[@]}" ]; then
  quick=(); [ "$timing" = quick ] && quick=(--quick)
  start=$(date +%s)
  timeout 150 "$build/cli/meshplan" calibrate --backend cuda "${quick[@]}" --out "$out/presets" --jsonl "$out/ours.jsonl" \
    > "$out/calibrate.log" 2>&1 ||
    echo "cuda-checks: calibrate --backend cuda failed (exit $?): $(tail -3 "$out/calibrate.log")"
  echo "cuda-checks: calibrate --backend cuda took $(( $(date +%s) - start )) s"
  if [[ " ${programs[*]} " == *" nccl_communicator_tests "* ]]; then  # the NCCL commbench, one rank (no mpirun)
    timeout 60 "$build/cli/meshplan" commbench --backend nccl --max-bytes 256M --iters 10 --collectives all_reduce \
      > "$out/commbench-nccl.log" 2>&1 || echo "cuda-checks: commbench --backend nccl failed (exit $?)"
    tail -n 8 "$out/commbench-nccl.log"
  fi
  if [ -s "$out/ours.jsonl" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null; then
    start=$(date +%s)
    PYTHONUNBUFFERED=1 timeout 150 python3 scripts/gpu/measure_device.py "$out/torch.jsonl" > "$out/torch.log" 2>&1 ||
      echo "cuda-checks: measure_device.py failed (exit $?): $(tail -3 "$out/torch.log")"
    echo "cuda-checks: measure_device.py took $(( $(date +%s) - start )) s"
    if [ -s "$out/torch.jsonl" ]; then
      python3 scripts/gpu/compare_with_torch.py "$out/ours.jsonl" "$out/torch.jsonl" > "$out/vs-torch.md"
      echo; echo "Our kernels against PyTorch's on this card (PyTorch / ours > 1: ours faster):"
      tail -n 14 "$out/vs-torch.md"
    fi
  else
    echo "cuda-checks: no PyTorch with CUDA here, or no rows of ours: no comparison with PyTorch"
  fi
  # The GPT executor's training steps against PyTorch's (scripts/gpu/gpt-bench.sh), full timing only.
  if [ "$timing" = full ]; then
    echo; echo "meshplan train --backend cuda against PyTorch on this card:"
    # Priced with the device preset calibrate just wrote (the issue's explain-against-measured check).
    calibrated=()
    compgen -G "$out/presets/devices/*.yaml" > /dev/null && calibrated=(GPT_BENCH_CALIBRATED="$out/presets")
    env "${calibrated[@]}" scripts/gpu/gpt-bench.sh "$build" "$out/gpt-bench" || echo "cuda-checks: gpt-bench.sh failed (exit $?)"
  fi
fi
exit "$status"
