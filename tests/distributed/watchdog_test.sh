#!/usr/bin/env bash
# watchdog_test.sh MPIRUN PROGRAM: 3 ranks, the last stops itself (SIGSTOP) while the others wait
# in an all-reduce (stalls.cpp). With CPPGRAD_COLLECTIVE_TIMEOUT=2 the job must end within
# seconds, not at mpirun's timeout, exit non-zero, with a watchdog line naming rank 2, and leave
# no process behind. A CPPGRAD_COLLECTIVE_TIMEOUT that is not a number of seconds is refused.
set -uo pipefail
mpirun_script="$1" program="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
start=$(date +%s)
output=$(CPPGRAD_COLLECTIVE_TIMEOUT=2 MPIRUN_TIMEOUT=60 timeout 90 "$mpirun_script" 3 "$program" 2>&1)
code=$?
elapsed=$(( $(date +%s) - start ))
echo "$output" | grep -v '^ *$'
echo "exit code $code after ${elapsed} s"
[ "$code" -ne 0 ] || fail "the job exited 0"
[ "$code" -ne 124 ] || fail "the job hung until timeout killed it"
grep -q "the all-reduce completed" <<< "$output" && fail "a rank went on past the collective"
# the timeout (2 s: a rank of a sanitized build on a busy machine may take a second to reach
# the first barrier) and the grace period for answers (1 s): the line comes from rank 0 or rank 1
grep -Eq "cppgrad watchdog: rank [01] of 3: a collective \(its [0-9]+(st|nd|rd|th) wait\) has waited [0-9.]+ s, past the collective timeout of 2 s \(CPPGRAD_COLLECTIVE_TIMEOUT\): rank 2 did not answer within 1.0 s" <<< "$output" \
  || fail "no watchdog line naming rank 2"
grep -Eq "rank [01] is in its [0-9]+(st|nd|rd|th) wait; ending the job" <<< "$output" \
  || fail "the watchdog line does not say the other waiting rank answered"
[ "$elapsed" -le 15 ] || fail "the job took ${elapsed} s to end"
sleep 0.5
pgrep -f -- "^$program" > /dev/null && fail "a process of the job is still there: $(pgrep -af -- "^$program")"

output=$(CPPGRAD_COLLECTIVE_TIMEOUT=soon MPIRUN_TIMEOUT=60 timeout 90 "$mpirun_script" 2 "$program" 2>&1)
code=$?
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] || fail "CPPGRAD_COLLECTIVE_TIMEOUT=soon: exit code $code"
grep -q "CPPGRAD_COLLECTIVE_TIMEOUT is 'soon': not a positive number of seconds" <<< "$output" \
  || fail "CPPGRAD_COLLECTIVE_TIMEOUT=soon was not refused by name: $output"
echo "ok"
