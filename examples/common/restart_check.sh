#!/usr/bin/env bash
# restart_check.sh SEQ2SEQ DIR: training that survives a lost process. A 2-process seq2seq run
# under scripts/mpirun --max-restarts 2, with --save-every 3 --resume latest, loses a rank twice:
#   1. SIGKILL to a rank, once the run has written the checkpoint of a random step: Open MPI ends
#      the job, the launcher restarts it, and it resumes from its newest checkpoint;
#   2. SIGSTOP to a rank (stopped, not killed: it holds its connections and never answers):
#      with CPPGRAD_COLLECTIVE_TIMEOUT=2 the other rank's watchdog names it and ends the job
#      within seconds (distributed/watchdog.h), and the launcher restarts it again.
# The job must end with a checkpoint byte for byte that of the same run uninterrupted: the
# deterministic mode holds (CPPGRAD_DETERMINISTIC's default, the same 2 processes), and every
# checkpoint holds the whole run (weights, Adam's moments, the schedule, the loader's position,
# every rank's random stream, the curves).
# The steps and ranks are drawn from a seeded RANDOM (RESTART_CHECK_SEED, default 30); where in a
# step each signal lands depends on timing, which is the point: wherever it lands, the result is
# the same.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"  # fail
seq2seq="$1" dir="$2"
mpirun_script="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/mpirun"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
seed="${RESTART_CHECK_SEED:-30}"
RANDOM="$seed"
steps=72
run=(--threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 16 --seq-len 6 --vocab 10 --seed 7
     --train-size 192 --eval-every 20 --steps "$steps")
export RESTART_CHECK_TAG="$$"  # marks this test's processes, to find a rank's among them

"$mpirun_script" 2 "$seq2seq" "${run[@]}" --save straight.safetensors > straight.log

# The pid of rank $1 of this test's job (empty when there is none).
rank_pid() {
  local pid
  for pid in $(pgrep -f -- "$seq2seq" || true); do
    { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qx "RESTART_CHECK_TAG=$RESTART_CHECK_TAG" || continue
    { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$pid"; return; }
  done
  return 0
}

# Runs the restarting job in the background; once the checkpoint of step $2 or later is written,
# sends signal $1 to a random rank, then waits for the job. Sets `rank`, `signal_at` (seconds
# since the epoch, fractional) and `code`.
run_and_signal() {
  local signal="$1" step="$2" log="$3" name newest
  rm -rf ck
  "$mpirun_script" --max-restarts 2 2 "$seq2seq" "${run[@]}" --save-every 3 --keep-last 2 --save-dir ck \
    --resume latest --save "$log.safetensors" > "$log" 2>&1 &
  local job=$!
  rank=$((RANDOM % 2))
  for ((i = 0; i < 3000; i++)); do  # 60 s at most
    newest=$(ls ck 2>/dev/null | grep -o '^step-[0-9]*' | tail -n 1 | grep -o '[0-9]*$' || true)
    [ -n "$newest" ] && [ $((10#$newest)) -ge "$step" ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.02
  done
  local pid
  pid=$(rank_pid "$rank")
  [ -n "$pid" ] || { wait "$job" || true; fail "$signal: rank $rank had already ended (step $step is too late): $(tail -n 3 "$log")"; }
  kill -"$signal" "$pid"
  signal_at=$(date +%s.%N)
  echo "SIG$signal to rank $rank (pid $pid) after the checkpoint of step $((10#$newest))"
  code=0
  wait "$job" || code=$?
}

# 1. SIGKILL
run_and_signal KILL $((6 + RANDOM % 24)) killed.log
[ "$code" -eq 0 ] || fail "the restarted job failed (exit code $code): $(tail -n 5 killed.log)"
grep -q 'scripts/mpirun: the job failed (exit code [0-9]*); restart 1 of 2' killed.log || fail "no restart: $(tail -n 5 killed.log)"
grep -q '^restart 1 of this job' killed.log || fail "the restarted program did not see CPPGRAD_RESTART_COUNT"
grep -q 'resumed from ck/step-[0-9]*.safetensors' killed.log || fail "the restart did not resume from a checkpoint"
cmp straight.safetensors killed.log.safetensors || fail "after SIGKILL and a restart, the run differs from the uninterrupted one"
echo "SIGKILL: $(grep -o 'resumed from [^ ]* at step [0-9]*' killed.log); the final checkpoint is the uninterrupted run's"

# 2. SIGSTOP, ended by the watchdog
export CPPGRAD_COLLECTIVE_TIMEOUT=2
run_and_signal STOP $((6 + RANDOM % 24)) stopped.log
unset CPPGRAD_COLLECTIVE_TIMEOUT
[ "$code" -eq 0 ] || fail "the restarted job failed (exit code $code): $(tail -n 5 stopped.log)"
grep -q "cppgrad watchdog: rank $((1 - rank)) of 2: .* rank $rank did not answer" stopped.log \
  || fail "the watchdog did not name rank $rank: $(grep -m 3 -i 'watchdog\|abort' stopped.log)"
grep -q 'restart 1 of 2' stopped.log || fail "no restart after the watchdog: $(tail -n 5 stopped.log)"
waited=$(grep -o 'has waited [0-9.]* s' stopped.log | head -n 1 | grep -o '[0-9.]*')
# the timeout, its grace period (1 s at a timeout of 2) and a millisecond's polling; 2 s of slack
awk -v w="$waited" 'BEGIN { exit !(w >= 2 && w <= 5) }' || fail "the watchdog ended the job after $waited s, not within 2 to 5"
cmp straight.safetensors stopped.log.safetensors || fail "after SIGSTOP and a restart, the run differs from the uninterrupted one"
[ -z "$(rank_pid 0)$(rank_pid 1)" ] || fail "a rank of the job is still there"
echo "SIGSTOP: $(grep -o 'has waited [0-9.]* s, past the collective timeout of [0-9]* s' stopped.log);" \
     "$(grep -o 'resumed from [^ ]* at step [0-9]*' stopped.log | tail -n 1); the final checkpoint is the uninterrupted run's"
echo "ok (RESTART_CHECK_SEED=$seed)"
