#!/usr/bin/env bash
# `mpirun -np N meshplan train --plan plan.json` as a user runs it: a
# dp2 x tp2 (ZeRO-1) plan on 4 ranks and a dp2 x pp2 x tp2 interleaved plan
# with sequence parallelism on 8 ranks must log, from rank 0 only, the same
# losses as the one-device plan of the same global batch (relative 1e-5); a
# checkpoint saved by the 4-rank run after step 3 must resume under the
# 8-rank plan with the uninterrupted run's losses; and a job with the wrong
# number of ranks must be refused with exit status 2 and the right command.
# Multi-rank metrics lines carry mfu and memory like one rank's, and the
# evaluations (--eval-every 3 --eval-samples 5: a padded last round on 2
# data-parallel ranks) equal the one-device plan's (loss 1e-5, accuracy).
#
# usage: cli_train_mpi.sh MPIEXEC MESHPLAN MODEL_YAML CORPUS WORK_DIR
set -u
. "$(cd "$(dirname "$0")" && pwd)/cli_train_common.sh"  # fail, emit, losses, compare
mpiexec=$1 meshplan=$2 model=$3 corpus=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

emit one 1 dp=1 2 8 --zero 0
emit four 4 dp=2,tp=2 2 8 --zero 1
emit eight 8 dp=2,pp=2,tp=2 2 8 --zero 1 --sequence-parallel --schedule interleaved:2

train=(train --data "text:$corpus" --steps 6 --log-every 1)

"$meshplan" "${train[@]}" --plan one.json --metrics one.jsonl --eval-every 3 --eval-samples 5 > one.out 2>&1 ||
  fail "one rank: $(tail -3 one.out)"
"$mpiexec" -np 4 "$meshplan" "${train[@]}" --plan four.json --metrics four.jsonl --eval-every 3 --eval-samples 5 \
  > four.out 2>&1 || fail "4 ranks: $(tail -5 four.out)"
compare one.jsonl four.jsonl "dp=2,tp=2 zero 1 (4 ranks)"
# The fields in the order the metrics lines write them: accuracy, loss, samples.
evals() { grep '"kind":"eval"' "$1" | grep -o '"eval_\(accuracy\|loss\|samples\)":[^,}]*' | cut -d: -f2 | paste - - -; }
[ "$(evals one.jsonl | wc -l)" -eq 2 ] || fail "one rank: $(evals one.jsonl | wc -l) evaluations, not 2"
paste <(evals one.jsonl) <(evals four.jsonl) | awk '
  { d = ($5 - $2) / $2; if (d < 0) d = -d
    if (NF != 6 || d > 1e-5 || $1 != $4 || $3 != $6) { printf "FAILED: evaluation %d: 4 ranks %s %s %s, one device %s %s %s\n", NR, $4, $5, $6, $1, $2, $3; bad = 1 } }
  END { printf "evaluations: %d equal to the one-device plan'"'"'s (loss, accuracy, samples)\n", NR; exit bad }' || exit 1
"$mpiexec" -np 8 "$meshplan" "${train[@]}" --plan eight.json --metrics eight.jsonl > eight.out 2>&1 ||
  fail "8 ranks: $(tail -5 eight.out)"
compare one.jsonl eight.jsonl "dp=2,pp=2,tp=2 interleaved:2 sp zero 1 (8 ranks)"
# Multi-rank metrics carry MFU and rank 0's memory ledger, as one rank's do.
grep -q '"mfu":null' four.jsonl && fail "4-rank metrics without mfu: $(head -1 four.jsonl)"
grep -q '"memory_bytes":null' four.jsonl && fail "4-rank metrics without memory: $(head -1 four.jsonl)"
grep -q '"memory":{' four.jsonl || fail "4-rank metrics without the memory breakdown: $(head -1 four.jsonl)"
[ "$(grep -c '^step' four.out)" -eq 6 ] || fail "the 4-rank job printed $(grep -c '^step' four.out) step lines, not 6 (rank 0 only)"

# Resharding through the CLI: stop the 4-rank run after step 3, resume under the 8-rank plan.
"$mpiexec" -np 4 "$meshplan" "${train[@]}" --plan four.json --checkpoint-dir ck --stop-after 3 > stop.out 2>&1 ||
  fail "4 ranks, --stop-after: $(tail -5 stop.out)"
"$mpiexec" -np 8 "$meshplan" "${train[@]}" --plan eight.json --checkpoint-dir ck --resume --metrics resumed.jsonl \
  > resumed.out 2>&1 || fail "8 ranks, --resume: $(tail -5 resumed.out)"
grep -q "resumed from ck/step-000003 at step 3" resumed.out || fail "no resume line: $(head -3 resumed.out)"
grep '"kind":"train"' one.jsonl | tail -n 3 > one-tail.jsonl
compare one-tail.jsonl resumed.jsonl "saved under dp=2,tp=2, resumed under dp=2,pp=2,tp=2 (steps 3-5)"

# The wrong number of ranks is refused, naming the command that fits.
"$mpiexec" -np 2 "$meshplan" "${train[@]}" --plan four.json > wrong.out 2>&1
status=$?
[ "$status" -eq 2 ] || fail "4-rank plan on 2 ranks: exit status $status, expected 2"
grep -q "the plan needs 4 ranks (dp=2,tp=2) but mpirun started 2; run \`mpirun -np 4" wrong.out ||
  fail "4-rank plan on 2 ranks: $(head -3 wrong.out)"
echo "refused on 2 ranks: $(grep -m1 'plan needs' wrong.out)"
