#!/usr/bin/env bash
# restart_check.sh SEQ2SEQ DIR: training that survives a lost process. A 2-process seq2seq run
# under scripts/mpirun --max-restarts 2, with --save-every 3 --resume latest, loses a rank:
#   1. to SIGKILL, right after the checkpoint of a random step: Open MPI ends the job, the
#      launcher restarts it, and it resumes from its newest checkpoint;
#   2. to SIGSTOP (stopped, not killed: it holds its connections and never answers), after the
#      checkpoint of a random step: with CPPGRAD_COLLECTIVE_TIMEOUT=2 the other rank's watchdog
#      names it and ends the job within seconds (distributed/watchdog.h), and the launcher
#      restarts it;
#   3. to SIGSTOP at the end of the run, after its last collective: the watchdog's barrier at the
#      end of the ProcessGroup names it the same way.
# Each job must end with a checkpoint byte for byte that of the same run uninterrupted: the
# deterministic mode holds (CPPGRAD_DETERMINISTIC's default, the same 2 processes), and every
# checkpoint holds the whole run (weights, Adam's moments, the schedule, the loader's position,
# every rank's random stream, the curves).
# The rank raises the signal on itself (CPPGRAD_INJECT_SIGNAL, examples/common/checkpoints.h) on
# the job's first start, so the signal lands at the chosen step however loaded the machine is;
# the steps and ranks are drawn from a seeded RANDOM (RESTART_CHECK_SEED, default 30).
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

"$mpirun_script" 2 "$seq2seq" "${run[@]}" --save straight.safetensors > straight.log

# Runs the restarting job with a random rank told to raise SIG$1 after the checkpoint of step $2
# or later ("end": at the end of the run), output in $3, and checks that the job restarted, that
# its final checkpoint is the uninterrupted run's, and that no process of it is left. Sets `rank`.
run_losing_a_rank() {
  local signal="$1" when="$2" log="$3" code=0 pid
  rank=$((RANDOM % 2))
  rm -rf ck "$log.inject"
  # The ranks' injection lines go to $log.inject as well: an aborted job may lose a stopped
  # rank's last output in mpirun's forwarding.
  CPPGRAD_INJECT_SIGNAL="$signal:$rank:$when" CPPGRAD_INJECT_SIGNAL_LOG="$PWD/$log.inject" "$mpirun_script" --max-restarts 2 2 "$seq2seq" "${run[@]}" \
    --save-every 3 --keep-last 2 --save-dir ck --resume latest --save "$log.safetensors" > "$log" 2>&1 || code=$?
  grep -m 1 "^CPPGRAD_INJECT_SIGNAL: rank $rank (pid [0-9]*) raises SIG$signal" "$log.inject" \
    || fail "rank $rank did not raise SIG$signal ($when): $(tail -n 5 "$log")"
  [ "$code" -eq 0 ] || fail "the restarted job failed (exit code $code): $(tail -n 5 "$log")"
  grep -q 'scripts/mpirun: the job failed (exit code [0-9]*); restart 1 of 2' "$log" || fail "no restart: $(tail -n 5 "$log")"
  grep -q '^restart 1 of this job' "$log" || fail "the restarted program did not see CPPGRAD_RESTART_COUNT"
  grep -q 'resumed from ck/step-[0-9]*.safetensors' "$log" || fail "the restart did not resume from a checkpoint"
  cmp straight.safetensors "$log.safetensors" || fail "after SIG$signal and a restart, the run differs from the uninterrupted one"
  # Every rank of every start said its pid; scripts/mpirun has returned, so each must be gone (a
  # zombie not yet reaped is gone too).
  for pid in $(grep -o '^CPPGRAD_INJECT_SIGNAL: rank [0-9]* is pid [0-9]*' "$log.inject" | grep -o '[0-9]*$'); do
    case "$(ps -o stat= -p "$pid" 2>/dev/null || true)" in
      '' | Z*) ;;
      *) fail "a rank of the job is still there (pid $pid)" ;;
    esac
  done
}

# The watchdog's line in $1 names rank $rank and says it waited the timeout and its grace period.
check_watchdog_named_rank() {
  local log="$1" waited
  grep -q "cppgrad watchdog: rank $((1 - rank)) of 2: .* rank $rank did not answer" "$log" \
    || fail "the watchdog did not name rank $rank: $(grep -m 3 -i 'watchdog\|abort' "$log")"
  waited=$(grep -o 'has waited [0-9.]* s' "$log" | head -n 1 | grep -o '[0-9.]*')
  # the timeout, its grace period (1 s at a timeout of 2) and a millisecond's polling; 2 s of slack
  awk -v w="$waited" 'BEGIN { exit !(w >= 2 && w <= 5) }' || fail "the watchdog ended the job after $waited s, not within 2 to 5"
  echo "$(grep -o 'has waited [0-9.]* s, past the collective timeout of [0-9]* s' "$log");" \
       "$(grep -o 'resumed from [^ ]* at step [0-9]*' "$log" | tail -n 1); the final checkpoint is the uninterrupted run's"
}

# 1. SIGKILL
run_losing_a_rank KILL $((6 + RANDOM % 24)) killed.log
echo "SIGKILL: $(grep -o 'resumed from [^ ]* at step [0-9]*' killed.log); the final checkpoint is the uninterrupted run's"

# 2. SIGSTOP during training, 3. SIGSTOP at the end, each ended by the watchdog
export CPPGRAD_COLLECTIVE_TIMEOUT=2
run_losing_a_rank STOP $((6 + RANDOM % 24)) stopped.log
echo -n "SIGSTOP: " && check_watchdog_named_rank stopped.log
run_losing_a_rank STOP end stopped_at_end.log
echo -n "SIGSTOP at the end: " && check_watchdog_named_rank stopped_at_end.log
echo "ok (RESTART_CHECK_SEED=$seed)"
