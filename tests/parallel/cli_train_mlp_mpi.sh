#!/usr/bin/env bash
# `mpirun -np N meshplan train --plan plan.json` for an MLP (issue 17): dp=2,
# dp=2 with ZeRO 1 and fsdp=2 on 2 ranks must log, from rank 0 only, the
# losses of the one-device plan of the same global batch (relative 1e-5); a
# checkpoint of the one-device run after step 3 resumes under fsdp=2 with
# the uninterrupted run's losses; tp=2 and dp=2,tp=2 (4 ranks) log the same
# losses too, and a dp=2,tp=2 checkpoint resumes on one device; a pp=2 plan
# is refused naming mesh.pp.
#
# usage: cli_train_mlp_mpi.sh MPIEXEC MESHPLAN MODEL_YAML WORK_DIR
set -u
. "$(cd "$(dirname "$0")" && pwd)/cli_train_common.sh"  # fail, emit, losses, compare
mpiexec=$1 meshplan=$2 model=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

emit one 1 dp=1 4 16 --zero 0
emit dp2 2 dp=2 4 16 --zero 0
emit zero1 2 dp=2 4 16 --zero 1
emit fsdp2 2 fsdp=2 4 16 --zero 0
emit tp2 2 tp=2 4 16 --zero 0
emit dp2tp2 4 dp=2,tp=2 4 16 --zero 0
emit pp2 2 pp=2 4 16 --zero 0

train=(train --data synthetic --steps 8 --log-every 1 --weight-decay 0.1 --lr 0.01)

"$meshplan" "${train[@]}" --plan one.json --metrics one.jsonl > one.out 2>&1 || fail "one rank: $(tail -3 one.out)"
for plan in dp2 zero1 fsdp2; do
  "$mpiexec" -np 2 "$meshplan" "${train[@]}" --plan $plan.json --metrics $plan.jsonl > $plan.out 2>&1 ||
    fail "$plan: $(tail -5 $plan.out)"
  compare one.jsonl $plan.jsonl "MLP $plan (2 ranks)"
  [ "$(grep -c '^step' $plan.out)" -eq 8 ] || fail "$plan printed $(grep -c '^step' $plan.out) step lines, not 8 (rank 0 only)"
done

# A one-device checkpoint after step 3 resumes under fsdp=2 with the uninterrupted losses.
"$meshplan" "${train[@]}" --plan one.json --checkpoint-dir ck --stop-after 3 > stop.out 2>&1
[ -f ck/step-000003/COMPLETE ] || fail "no checkpoint at step 3: $(tail -3 stop.out)"
"$mpiexec" -np 2 "$meshplan" "${train[@]}" --plan fsdp2.json --checkpoint-dir ck --resume --metrics resumed.jsonl \
  > resumed.out 2>&1 || fail "resume under fsdp=2: $(tail -5 resumed.out)"
grep -q "resumed from" resumed.out || fail "the fsdp=2 run did not resume: $(head -3 resumed.out)"
grep '"loss"' one.jsonl | tail -n +4 > one-after-3.jsonl
compare one-after-3.jsonl resumed.jsonl "one device -> fsdp=2 resume at step 3"

# Tensor parallelism: column/row-parallel linear pairs (Mlp::split_over_tp).
"$mpiexec" -np 2 "$meshplan" "${train[@]}" --plan tp2.json --metrics tp2.jsonl > tp2.out 2>&1 ||
  fail "tp2: $(tail -5 tp2.out)"
compare one.jsonl tp2.jsonl "MLP tp=2 (2 ranks)"
"$mpiexec" -np 4 "$meshplan" "${train[@]}" --plan dp2tp2.json --metrics dp2tp2.jsonl --checkpoint-dir ck4 --stop-after 3 \
  > dp2tp2.out 2>&1 || fail "dp2tp2: $(tail -5 dp2tp2.out)"
grep '"loss"' one.jsonl | head -3 > one-first-3.jsonl
compare one-first-3.jsonl dp2tp2.jsonl "MLP dp=2,tp=2 (4 ranks), steps 1-3"
# Its checkpoint holds whole tensors: the one-device plan resumes from it with the uninterrupted losses.
"$meshplan" "${train[@]}" --plan one.json --checkpoint-dir ck4 --resume --metrics from-tp.jsonl > from-tp.out 2>&1 ||
  fail "one device from the dp=2,tp=2 checkpoint: $(tail -5 from-tp.out)"
grep -q "resumed from" from-tp.out || fail "the one-device run did not resume: $(head -3 from-tp.out)"
compare one-after-3.jsonl from-tp.jsonl "dp=2,tp=2 -> one device resume at step 3"

"$meshplan" "${train[@]}" --plan pp2.json > pp2.out 2>&1 && fail "the pp=2 MLP plan trained"
grep -q "mesh.pp: an MLP trains on dp, fsdp and tp meshes" pp2.out || fail "pp=2 refusal: $(tail -3 pp2.out)"
echo "cli_train_mlp_mpi: passed"
