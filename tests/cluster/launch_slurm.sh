#!/usr/bin/env bash
# `meshplan launch --slurm --submit --wait` against a real single-node Slurm
# (run inside tests/cluster/slurm_single_node.sh, which starts munged,
# slurmctld and slurmd with 2 CPUs as 2 tasks): a dp=2 plan of the tiny GPT,
# submitted as an sbatch script whose ranks srun --mpi=pmix starts, must log
# the same losses as the same plan under `meshplan launch` (mpirun); the
# script must ask for 1 node x 2 tasks and no GPUs, the job's output must hold
# rank 0's step lines, and a plan needing more tasks than a node has must be
# refused before anything is written.
#
# usage: launch_slurm.sh MESHPLAN MODEL_YAML CORPUS WORK_DIR
set -u
meshplan=$1 model=$2 corpus=$3 work=$4
. "$(cd "$(dirname "$0")/../parallel" && pwd)/cli_train_common.sh"  # fail, emit, compare
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

emit dp2 2 dp=2 2 8 --zero 0
train=(--data "text:$corpus" --steps 4 --log-every 1)

# timeout: a job Slurm cannot place waits forever; the harness must still tear down.
timeout 150 "$meshplan" launch --plan dp2.json --slurm --submit --wait --script job.sbatch --output "job-%j.out" \
  "${train[@]}" --metrics slurm.jsonl > launch.out 2> launch.err ||
  fail "launch --slurm --submit --wait: $(tail -5 launch.err) $(cat job-*.out 2>/dev/null | tail -5)"
cat launch.err
grep -q "^meshplan launch: submitted Slurm job [0-9]* (output: job-[0-9]*.out); waiting" launch.err ||
  fail "no job id: $(cat launch.err)"
grep -qx "#SBATCH --nodes=1" job.sbatch && grep -qx "#SBATCH --ntasks-per-node=2" job.sbatch ||
  fail "the script does not ask for 1 node x 2 tasks: $(cat job.sbatch)"
grep -q "gpus-per-node" job.sbatch && fail "a CPU plan's script asks for GPUs: $(cat job.sbatch)"
grep -q "^srun --mpi=pmix .*meshplan train --plan $work/dp2.json" job.sbatch || fail "no srun line: $(cat job.sbatch)"
steps=$(cat job-*.out | grep -c '^step')
[ "$steps" -eq 4 ] || fail "the job's output has $steps step lines, not 4 (rank 0's): $(cat job-*.out)"

"$meshplan" launch --plan dp2.json "${train[@]}" --metrics mpirun.jsonl > mpirun.out 2>&1 ||
  fail "launch (mpirun): $(tail -5 mpirun.out)"
compare mpirun.jsonl slurm.jsonl "dp=2 as a Slurm job (srun --mpi=pmix) against mpirun"

# Four ranks on a cluster of 2-device nodes: 2 nodes, which this Slurm does not
# have; and tasks per node that do not divide the ranks are refused, nothing written.
emit dp4 4 dp=4 1 8 --zero 0
"$meshplan" launch --plan dp4.json --slurm --print "${train[@]}" > dp4.sbatch || fail "launch --print of dp=4"
grep -qx "#SBATCH --nodes=2" dp4.sbatch || fail "dp=4 on 2-device nodes is not 2 nodes: $(cat dp4.sbatch)"
"$meshplan" launch --plan dp4.json --slurm --tasks-per-node 3 --script bad.sbatch "${train[@]}" 2> bad.err
status=$?
[ "$status" -eq 2 ] && [ ! -e bad.sbatch ] && grep -q -- "--tasks-per-node: 3 does not divide the 4 ranks" bad.err ||
  fail "--tasks-per-node 3 for 4 ranks: status $status, $(cat bad.err)"
echo "PASS: launch --slurm --submit --wait trained dp=2 under Slurm with mpirun's losses"
