#!/usr/bin/env bash
# failure_test.sh MPIRUN PROGRAM: 2 ranks, the last throws while rank 0 waits in a collective.
# The job must end by the thrower's MPI_Abort (not hang until mpirun's timeout), exit non-zero
# and print the thrower's message.
set -uo pipefail
mpirun_script="$1" program="$2"
output=$(MPIRUN_TIMEOUT=60 timeout 90 "$mpirun_script" 2 "$program" 2>&1)
code=$?
echo "$output"
echo "exit code $code"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$code" -ne 0 ] || fail "the job exited 0"
[ "$code" -ne 124 ] || fail "the job hung until timeout killed it"
grep -q "time limit for job execution has been reached" <<< "$output" && fail "the job hung until mpirun's timeout"
grep -q "rank 1 of 2: uncaught exception: rank 1 failed on purpose" <<< "$output" || fail "the rank's message is missing"
grep -q "the all-reduce completed" <<< "$output" && fail "rank 0 went on past the collective"
echo "ok"
