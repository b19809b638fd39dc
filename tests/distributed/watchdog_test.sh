#!/usr/bin/env bash
# watchdog_test.sh MPIRUN PROGRAM: 3 ranks, the last stops itself (SIGSTOP), first while the
# others wait in an all-reduce, then after its last collective, as the others end their
# ProcessGroup (stalls.cpp). With CPPGRAD_COLLECTIVE_TIMEOUT=2 each job must be ended by the
# watchdog, not by mpirun's timeout: exit non-zero, with a watchdog line naming rank 2 that says
# it waited the timeout plus at most its grace period, and leave no process behind. A
# CPPGRAD_COLLECTIVE_TIMEOUT that is not a number of seconds is refused.
set -uo pipefail
mpirun_script="$1" program="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
program_name=$(basename "$program" | cut -c1-15)  # as ps shows a command's name

# Runs the program on 3 ranks with its arguments "$@" and checks how the watchdog ended it.
check_stopped_rank_ends_the_job() {
  local output code waited pid
  output=$(CPPGRAD_COLLECTIVE_TIMEOUT=2 MPIRUN_TIMEOUT=60 timeout 90 "$mpirun_script" 3 "$program" "$@" 2>&1)
  code=$?
  echo "$output" | grep -v '^ *$'
  echo "exit code $code"
  [ "$code" -ne 0 ] || fail "$*: the job exited 0"
  [ "$code" -ne 124 ] || fail "$*: the job hung until timeout killed it"
  grep -q "time limit for job execution has been reached" <<< "$output" && fail "$*: the job hung until mpirun's timeout"
  # Ranks 0 and 1 must never finish the all-reduce without rank 2. Rank 2 itself may: ending the
  # job, Open MPI continues a stopped process (SIGCONT) before it terminates it, and the others'
  # shares may already be in its buffers.
  grep -Eq "rank [01]: the all-reduce completed" <<< "$output" && fail "$*: a rank went on past the collective"
  grep -Eq "cppgrad watchdog: rank [01] of 3: a collective \(its [0-9]+(st|nd|rd|th) wait\) has waited [0-9.]+ s, past the collective timeout of 2 s \(CPPGRAD_COLLECTIVE_TIMEOUT\): rank 2 did not answer within 1.0 s" <<< "$output" \
    || fail "$*: no watchdog line naming rank 2"
  grep -Eq "rank [01] is in its [0-9]+(st|nd|rd|th) wait; ending the job" <<< "$output" \
    || fail "$*: the watchdog line does not say the other waiting rank answered"
  # The watchdog's own measure, not the wall clock of the job: the timeout (2 s) and the grace
  # period (1 s), and 2 s for a rank descheduled on a loaded machine, or under a sanitizer.
  waited=$(grep -o 'has waited [0-9.]* s' <<< "$output" | head -n 1 | grep -o '[0-9.]*')
  awk -v w="$waited" 'BEGIN { exit !(w >= 2 && w <= 5) }' || fail "$*: the watchdog ended the job after $waited s, not within 2 to 5"
  # Ending the job, mpirun sends the ranks SIGCONT and SIGTERM and may return before the kernel has
  # finished tearing a rank down (its check for a dead child takes "not yet reaped" as dead), which
  # under the sanitizers or on a busy machine can take a while. So a rank still running this
  # program 30 s after mpirun returned was left behind; one that goes, or is a zombie, was not.
  # (The pid may also be reused by then: only a process of this program counts.)
  local state name
  for pid in $(grep -o '^rank [0-2] is pid [0-9]*' <<< "$output" | grep -o '[0-9]*$'); do
    for ((tenths = 0; ; tenths++)); do
      read -r state name < <(ps -o stat=,comm= -p "$pid" 2>/dev/null || true)
      case "${state:-}" in
        '' | Z*) break ;;
      esac
      [ "$name" = "$program_name" ] || break
      [ "$tenths" -lt 300 ] || fail "$*: a process of the job is still there 30 s after mpirun returned: pid $pid, state $state"
      sleep 0.1
    done
  done
  [ "$(grep -c '^rank [0-2] is pid [0-9]*' <<< "$output")" -eq 3 ] || fail "$*: not every rank said its pid"
}

check_stopped_rank_ends_the_job             # stopped while the others wait in an all-reduce
check_stopped_rank_ends_the_job --at-end    # stopped after its last collective

output=$(CPPGRAD_COLLECTIVE_TIMEOUT=soon MPIRUN_TIMEOUT=60 timeout 90 "$mpirun_script" 2 "$program" 2>&1)
code=$?
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] || fail "CPPGRAD_COLLECTIVE_TIMEOUT=soon: exit code $code"
grep -q "CPPGRAD_COLLECTIVE_TIMEOUT is 'soon': not a positive number of seconds" <<< "$output" \
  || fail "CPPGRAD_COLLECTIVE_TIMEOUT=soon was not refused by name: $output"
for rank in 0 1; do  # each rank names itself, though MPI has not started
  grep -q "rank $rank of 2: .*CPPGRAD_COLLECTIVE_TIMEOUT is 'soon'" <<< "$output" \
    || fail "CPPGRAD_COLLECTIVE_TIMEOUT=soon: no refusal from rank $rank of 2: $output"
done
echo "ok"
