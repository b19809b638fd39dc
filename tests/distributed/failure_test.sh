#!/usr/bin/env bash
# failure_test.sh MPIRUN PROGRAM: 2 ranks, the last throws while rank 0 waits in a collective.
# The job must end within seconds (not hang), exit non-zero and print the thrower's message.
set -uo pipefail
mpirun_script="$1" program="$2"
start=$(date +%s)
output=$(MPIRUN_TIMEOUT=60 timeout 90 "$mpirun_script" 2 "$program" 2>&1)
code=$?
elapsed=$(( $(date +%s) - start ))
echo "$output"
echo "exit code $code after ${elapsed} s"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$code" -ne 0 ] || fail "the job exited 0"
[ "$code" -ne 124 ] || fail "the job hung until timeout killed it"
grep -q "rank 1 of 2: uncaught exception: rank 1 failed on purpose" <<< "$output" || fail "the rank's message is missing"
grep -q "the all-reduce completed" <<< "$output" && fail "rank 0 went on past the collective"
[ "$elapsed" -le 20 ] || fail "the job took ${elapsed} s to end"
echo "ok"
