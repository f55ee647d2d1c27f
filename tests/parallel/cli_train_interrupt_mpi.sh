#!/usr/bin/env bash
# Ctrl-C on a 2-rank job (dp=2), as a user does it: `meshplan launch` gets
# SIGINT mid-training; every rank must stop after the same step, rank 0 save a
# complete checkpoint and print how to resume; launch exits 130; the printed
# command, run as is, must end on the uninterrupted 2-rank run's losses. Then
# plain mpirun: SIGUSR1 to mpirun (forwarded to the ranks at once) does the
# same; and SIGTERM to one rank alone stops both after the same step.
# (Ctrl-C on a plain mpirun is not tested: mpirun gives the ranks SIGTERM
# after 1 s and SIGKILL 1 s later, and on a loaded machine the save's fsyncs
# may outlast that second; docs/executor.md.)
#
# usage: cli_train_interrupt_mpi.sh MPIEXEC MESHPLAN MODEL_YAML CORPUS WORK_DIR
set -u
mpiexec=$1 meshplan=$2 model=$3 corpus=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }

"$meshplan" explain --model "$model" --cluster local-cpu --gpus 2 --mesh dp=2 --micro-batch 2 --global-batch 8 \
  --emit-plan two.json > two.explain 2>&1 || fail "explain: $(tail -3 two.explain)"
steps=400
train=(--data "text:$corpus" --steps $steps)
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
wait_lines() {  # file count: until the run has logged `count` steps (60 s at most)
  for _ in $(seq 600); do
    [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
check_stop() {  # out-file label: the message, a complete checkpoint; prints the resume command
  grep -q "interrupted after step [0-9]* of $steps; checkpoint ck-$2/step-" "$1" || fail "$2: no interrupt message: $(tail -5 "$1")"
  local saved
  saved=$(grep -o "checkpoint ck-$2/step-[0-9]*" "$1" | cut -d' ' -f2)
  [ -f "$saved/COMPLETE" ] || fail "$2: $saved is not complete"
  [ "$(grep -c 'resume with:' "$1")" -eq 1 ] || fail "$2: the resume line printed $(grep -c 'resume with:' "$1") times, not once"
  echo "$2: $(grep 'interrupted after' "$1")" >&2
  grep 'resume with:' "$1" | sed 's/^resume with: //'
}

"$mpiexec" -np 2 "$meshplan" train --plan two.json "${train[@]}" --metrics reference.jsonl > reference.out 2>&1 ||
  fail "uninterrupted run: $(tail -5 reference.out)"

# 1. meshplan launch, Ctrl-C (SIGINT to launch, as the terminal sends it).
"$meshplan" launch --plan two.json "${train[@]}" --metrics launch.jsonl --checkpoint-dir ck-launch > launch.out 2>&1 &
pid=$!
wait_lines launch.jsonl 3 || fail "launch: no steps logged: $(tail -5 launch.out)"
kill -INT $pid
wait $pid
status=$?
[ "$status" -eq 130 ] || fail "launch after SIGINT: exit status $status, expected 130: $(tail -5 launch.out)"
command=$(check_stop launch.out launch) || exit 1
case "$command" in *" launch --plan two.json "*"--checkpoint-dir ck-launch --resume") ;;
  *) fail "launch: the resume command is not a launch command: $command" ;; esac
eval "$command" > launch-resumed.out 2>&1 || fail "launch: the resume command failed: $(tail -5 launch-resumed.out)"
[ "$(losses launch.jsonl)" = "$(losses reference.jsonl)" ] ||
  fail "launch: interrupted and resumed losses differ from the uninterrupted run's"
# The same command once more: the run is finished; said, exit 0, nothing trained.
eval "$command" > launch-again.out 2>&1 || fail "launch: resuming the finished run failed: $(tail -5 launch-again.out)"
grep -q "training already finished: ck-launch/step-000400 holds step 400 of $steps" launch-again.out ||
  fail "launch: resuming the finished run: $(tail -5 launch-again.out)"

# 2. plain mpirun, SIGUSR1 to mpirun (forwarded to every rank at once).
"$mpiexec" -np 2 "$meshplan" train --plan two.json "${train[@]}" --metrics usr1.jsonl --checkpoint-dir ck-usr1 \
  > usr1.out 2>&1 &
pid=$!
wait_lines usr1.jsonl 3 || fail "mpirun: no steps logged: $(tail -5 usr1.out)"
kill -USR1 $pid
wait $pid
status=$?
[ "$status" -eq 130 ] || fail "mpirun after SIGUSR1: exit status $status, expected 130: $(tail -5 usr1.out)"
command=$(check_stop usr1.out usr1) || exit 1
case "$command" in "mpirun -np 2 "*"--checkpoint-dir ck-usr1 --resume") ;;
  *) fail "mpirun: the resume command does not start 2 ranks: $command" ;; esac
"$mpiexec" -np 2 "$meshplan" train --plan two.json "${train[@]}" --metrics usr1.jsonl --checkpoint-dir ck-usr1 \
  --resume > usr1-resumed.out 2>&1 || fail "mpirun: resume failed: $(tail -5 usr1-resumed.out)"
[ "$(losses usr1.jsonl)" = "$(losses reference.jsonl)" ] ||
  fail "mpirun: interrupted and resumed losses differ from the uninterrupted run's"

# 3. SIGTERM to rank 1 alone (as a batch system may deliver it to one task
# first): the ranks agree through the per-step all-reduce, rank 0 saves.
"$mpiexec" -np 2 "$meshplan" train --plan two.json "${train[@]}" --metrics term.jsonl --checkpoint-dir ck-term \
  > term.out 2>&1 &
pid=$!
wait_lines term.jsonl 3 || fail "mpirun: no steps logged: $(tail -5 term.out)"
rank1=
for child in $(pgrep -P $pid); do
  tr '\0' '\n' < /proc/$child/environ | grep -qx 'OMPI_COMM_WORLD_RANK=1' && rank1=$child
done
[ -n "$rank1" ] || fail "rank 1's process not found among mpirun's children: $(pgrep -P $pid)"
kill -TERM "$rank1"
wait $pid
status=$?
[ "$status" -eq 130 ] || fail "SIGTERM to rank 1: exit status $status, expected 130: $(tail -5 term.out)"
check_stop term.out term > /dev/null || exit 1
echo "every interrupted run saved a complete checkpoint and resumed to the uninterrupted losses"
