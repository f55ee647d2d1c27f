#!/usr/bin/env bash
# `--shrink` as a user runs it: GPT-3 175B planned as dp=2,tp=2 for four A100s
# is rehearsed on this machine through `mpirun -np 4 meshplan train --shrink`:
# rank 0 alone reports what was shrunk (layers 96 -> fewer, the same mesh),
# two steps train with finite losses, and `meshplan launch --shrink` passes
# --shrink to train but still refuses a mesh larger than this machine starts.
# Then two grouped-query plans (issue 17): Llama 3 8B on tp=4, whose 8 kv
# heads tp splits, shrinks to kv heads that tp still splits; Gemma 3 1B on
# dp=2,tp=2, whose single kv head (multi-query) tp replicates, keeps one.
#
# usage: cli_shrink_mpi.sh MPIEXEC MESHPLAN CORPUS WORK_DIR
set -u
mpiexec=$1 meshplan=$2 corpus=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }

# The cluster plan (it does not fit four A100s: explain says so, and still writes the file).
"$meshplan" explain --model gpt3-175b --cluster dgx-a100 --gpus 4 --mesh dp=2,tp=2 --micro-batch 1 --global-batch 4 \
  --emit-plan gpt3.json > explain.out 2>&1
[ -s gpt3.json ] || fail "explain wrote no plan: $(tail -3 explain.out)"

"$mpiexec" -np 4 "$meshplan" train --plan gpt3.json --shrink --data "text:$corpus" --steps 2 --metrics gpt3.jsonl \
  > train.out 2>&1 || fail "mpirun -np 4 train --shrink: $(tail -8 train.out)"
cat train.out
[ "$(grep -c '^--shrink:' train.out)" -eq 1 ] || fail "the shrink report was printed $(grep -c '^--shrink:' train.out) times, not once"
grep -Eq '^  layers +96 -> [0-9]+$' train.out || fail "no 'layers 96 -> n' line"
grep -Eq '^  hidden +12288 -> [0-9]+$' train.out || fail "no 'hidden 12288 -> n' line"
grep -q 'training dp=2,tp=2 on 4 ranks' train.out || fail "the shrunk plan did not train on the same mesh"
losses=$(grep -o '"loss":[^,]*' gpt3.jsonl | cut -d: -f2)
[ "$(echo "$losses" | wc -l)" -eq 2 ] || fail "$(echo "$losses" | wc -l) loss lines, not 2"
echo "$losses" | awk '{ if (!($1 > 0 && $1 < 100)) { print "FAILED: loss " $1; exit 1 } }' || exit 1

# Grouped-query attention through the shrink, trained on 4 ranks each (at sequence 2048: the
# shrunk sequence must fit the corpus's validation split).
for case in "llama3-8b tp=4" "gemma3-1b dp=2,tp=2"; do
  model=${case% *} mesh=${case#* }
  "$meshplan" explain --model "$model" --cluster dgx-h100 --gpus 4 --mesh "$mesh" --micro-batch 1 --global-batch 4 --seq 2048 \
    --emit-plan "$model.json" > "$model.explain" 2>&1
  [ -s "$model.json" ] || fail "explain wrote no $model plan: $(tail -3 "$model.explain")"
  "$mpiexec" -np 4 "$meshplan" train --plan "$model.json" --shrink --data "text:$corpus" --steps 2 --metrics "$model.jsonl" \
    > "$model.out" 2>&1 || fail "mpirun -np 4 train --shrink $model: $(tail -8 "$model.out")"
  cat "$model.out"
  grep -q "training $mesh on 4 ranks" "$model.out" || fail "the shrunk $model plan did not train on $mesh"
  losses=$(grep -o '"loss":[^,]*' "$model.jsonl" | cut -d: -f2)
  [ "$(echo "$losses" | wc -l)" -eq 2 ] || fail "$model: $(echo "$losses" | wc -l) loss lines, not 2"
  echo "$losses" | awk '{ if (!($1 > 0 && $1 < 100)) { print "FAILED: loss " $1; exit 1 } }' || exit 1
done
kv=$(grep -Eo '^  kv_heads +8 -> [0-9]+$' llama3-8b.out | awk '{ print $NF }')
[ -n "$kv" ] || fail "no 'kv_heads 8 -> n' line for llama3-8b"
[ $((kv % 4)) -eq 0 ] && [ "$kv" -ge 4 ] || fail "llama3-8b shrank to $kv kv heads, which tp=4 does not split"
! grep -q '^  kv_heads' gemma3-1b.out || fail "gemma3-1b's single kv head changed: $(grep '^  kv_heads' gemma3-1b.out)"

# launch: --shrink goes to train; a world above 4 x the hardware threads is refused.
"$meshplan" launch --plan gpt3.json --shrink --dry-run --steps 2 --data "text:$corpus" > launch.out 2>&1 ||
  fail "launch --dry-run: $(cat launch.out)"
grep -q -- ' train --plan gpt3.json --shrink --steps 2' launch.out || fail "launch did not pass --shrink: $(cat launch.out)"
big=$((8 * $(getconf _NPROCESSORS_ONLN)))
"$meshplan" explain --model gpt3-175b --cluster dgx-a100 --gpus "$big" --mesh "dp=$big" --micro-batch 1 \
  --global-batch "$big" --emit-plan big.json > big.explain 2>&1
[ -s big.json ] || fail "explain wrote no $big-rank plan: $(tail -3 big.explain)"
"$meshplan" launch --plan big.json --shrink --dry-run --data "text:$corpus" > big.out 2>&1
status=$?
[ "$status" -eq 2 ] || fail "launch of $big ranks exited $status, not 2: $(cat big.out)"
grep -q "needs $big ranks, and this machine starts at most $((4 * $(getconf _NPROCESSORS_ONLN)))" big.out || fail "refusal message: $(cat big.out)"
echo "cli_shrink_mpi: passed"
