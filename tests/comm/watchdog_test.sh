#!/usr/bin/env bash
# The watchdog requirement, checked on a real job: run watchdog_probe under
# mpirun with NP ranks and a TIMEOUT_S watchdog; at step 7 the last rank
# stalls or is SIGKILLed. Passes when mpirun exits non-zero, the job ends
# within 2 x TIMEOUT_S of the failure, and every surviving rank printed a
# line naming the collective (all_reduce on axis "dp", at step 7).
#
#   stall: the survivors' watchdog fires: "... waited more than T s; stopping the job"
#   kill:  mpirun notices the death and sends SIGTERM to the survivors first;
#          each prints "stopped by SIGTERM while waiting in all_reduce ..."
#
# usage: watchdog_test.sh MPIEXEC PROBE stall|kill NP TIMEOUT_S
set -u
mpiexec=$1 probe=$2 mode=$3 np=$4 timeout_s=$5
log=$(mktemp)
trap 'rm -f "$log"' EXIT

"$mpiexec" -n "$np" --oversubscribe "$probe" "$mode" "$timeout_s" >"$log" 2>&1
status=$?
end_ms=$(date +%s%3N)
cat "$log"
echo "----"

fail() { echo "watchdog_test ($mode): FAIL: $*"; exit 1; }

[ "$status" -ne 0 ] || fail "mpirun exited 0; the job should have been stopped"
failed_ms=$(sed -n 's/^watchdog_probe: victim rank [0-9]* [a-z]* at \([0-9]*\) ms$/\1/p' "$log" | head -n 1)
[ -n "$failed_ms" ] || fail "the victim rank never reached step 7"
elapsed_ms=$((end_ms - failed_ms))
limit_ms=$((2 * timeout_s * 1000))
echo "watchdog_test ($mode): mpirun exit status $status, job ended ${elapsed_ms} ms after the failure (limit ${limit_ms} ms)"
[ "$elapsed_ms" -le "$limit_ms" ] || fail "the job took ${elapsed_ms} ms to end, more than 2 x ${timeout_s} s"

collective='all_reduce on axis "dp" (1024 x f32) at step 7'
for ((rank = 0; rank < np - 1; ++rank)); do
  grep -F "meshplan: rank $rank: " "$log" | grep -qF "$collective" ||
    fail "rank $rank printed no line naming the collective ($collective)"
done
if [ "$mode" = stall ]; then
  grep -qF "$collective waited more than $timeout_s s; stopping the job" "$log" ||
    fail "no rank's watchdog reported the stall"
else
  grep -qF "stopped by SIGTERM while waiting in $collective" "$log" || fail "no SIGTERM note from a survivor"
fi
echo "watchdog_test ($mode): PASS"
