#!/usr/bin/env bash
# The tamper table: a real checkpoint of a training program, written by a 3-step run, rewritten
# one entry at a time (edit_checkpoint) and resumed by the same program. Every row must end in a
# refusal naming the entry (exit 2, one line on stderr holding the name) or a stop naming the
# quantity (exit 4); never in a run that exits 0 on nonsense. The rows: values out of the range
# their meaning allows, names misspelt (a leading zero, a space, trailing junk), entries no part
# reads (a million would be refused as the first is), entries missing, a file of another format,
# and NaN, inf or 1e30 in weights, moments and averaged weights.
# The untouched checkpoint itself must resume (exit 0).
#
#   tamper_check.sh PROGRAM BINARY EDIT_CHECKPOINT DIR    PROGRAM: char_lm, seq2seq or gpt
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"  # fail
program="$1" bin="$2" edit="$3" dir="$4"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || data="$(dirname "$0")/../../README.md"
head -c 3000 "$data" > small.txt
size=(--threads 1 --d-model 8 --heads 2 --layers 1 --ff 16 --batch 4 --eval-every 100)
case "$program" in
  char_lm) args=("${size[@]}" --data small.txt --seq-len 8 --warmup 2 --sample-len 0) ;;
  seq2seq) args=("${size[@]}" --seq-len 4 --vocab 8 --train-size 64 --average 0.9) ;;
  gpt) args=("${size[@]}" --data small.txt --tokenizer char --seq-len 8 --warmup 1 --decay-steps 50 --sample-len 0
             --eval-windows 4) ;;
  *) fail "unknown program $program" ;;
esac

"$bin" "${args[@]}" --steps 3 --save run.safetensors > run.log
"$bin" "${args[@]}" --steps 5 --resume run.safetensors > resumed.log || fail "$program: its own checkpoint did not resume"
names="$("$edit" run.safetensors names)"
weight="$(grep -m1 '^model\.' <<< "$names")"  # the first weight of the model
module_name="${weight#model.}"                                     # as the model's own load names it

rows=0
# row EXPECT PHRASE EDIT...: the checkpoint with one EDIT (edit_checkpoint's arguments), resumed
# for 2 steps, must be refused (EXPECT refuse: exit 2) or stopped (stop: exit 4) with one line on
# stderr that holds PHRASE.
row() {
  local expect="$1" phrase="$2" want=2
  shift 2
  [ "$expect" = stop ] && want=4
  "$edit" run.safetensors tampered.safetensors "$@" || fail "edit_checkpoint $* failed"
  set +e
  "$bin" "${args[@]}" --steps 5 --resume tampered.safetensors > tampered.out 2> tampered.err
  local code=$?
  set -e
  [ "$code" -ne 0 ] || fail "$program: '$*' was accepted and trained on (exit 0)"
  [ "$code" -eq "$want" ] || fail "$program: '$*' gave exit code $code, not $want: $(head -c 400 tampered.err)"
  [ "$(wc -l < tampered.err)" -eq 1 ] || fail "$program: '$*' did not give a one-line message: $(head -c 400 tampered.err)"
  grep -qF -- "$phrase" tampered.err || fail "$program: '$*': the message does not name '$phrase': $(cat tampered.err)"
  rows=$((rows + 1))
}

# ---- range: values no run uses (each once trained on NaN or an exploding loss, or restarted) ----
row refuse "'param_groups.0.eps'" set optim.param_groups.0.eps 0
row refuse "'param_groups.0.weight_decay'" set optim.param_groups.0.weight_decay 1e30
row refuse "'param_groups.0.beta2'" set optim.param_groups.0.beta2 0
row refuse "'param_groups.0.beta1'" set optim.param_groups.0.beta1 1
row refuse "'param_groups.0.lr'" set optim.param_groups.0.lr 1e30
row refuse "'param_groups.0.lr'" set optim.param_groups.0.lr -1
row refuse "'base_lrs.0'" set sched.base_lrs.0 1e30
row refuse "'last_step'" set sched.last_step -1
row refuse "'train.step'" set train.step -1
row refuse "state.0.step" set optim.state.0.step 0
# an option the checkpoint keeps, tampered in its metadata: refused as the option itself would be
row refuse "the checkpoint's lr '1e30' is not a value --lr takes" meta lr 1e30
# another program's checkpoint: said so first, not taken for another task or text
other=char_lm && [ "$program" = char_lm ] && other=seq2seq
row refuse "this is a $other checkpoint (its metadata's program), not $program's" meta program "$other"
if [ "$program" = gpt ]; then  # the model's constants: each in the range a config.json's is held to
  row refuse "norm_eps is 1e+300, not in [1e-12, 0.01]" meta norm_eps 1e300
  row refuse "norm_eps is 1, not in [1e-12, 0.01]" meta norm_eps 1
  row refuse "rope_theta is 1e+300, not in [2, 10000000000]" meta rope_theta 1e300
  row refuse "rope_theta is 1e-300, not in [2, 10000000000]" meta rope_theta 1e-300
  row refuse "the checkpoint's norm_eps is '1e999', not a number a double holds" meta norm_eps 1e999
  # a size of 0 once divided by zero (SIGFPE) where the heads are checked against d_model
  row refuse "has 'heads' = '0' in its metadata, not a whole number of 1 or more" meta heads 0
fi
# ---- size: a width or a length in the metadata that the file's tensors cannot back ----------------
# Resumed with no size option given (each is then the checkpoint's), the model the edited metadata
# describes would take gigabytes and minutes before its tensors were compared with the file's. It
# must be refused at the first allocation past 4 times the file plus 64 MiB, naming the file, the
# whole process staying under PEAK_MB (CPPGRAD_TAMPER_PEAK_MB; a sanitizer's shadow memory
# takes more).
peak_mb="${CPPGRAD_TAMPER_PEAK_MB:-256}"
resume_args=()
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --d-model|--heads|--layers|--ff|--seq-len) i=$((i + 1)) ;;  # and its value
    *) resume_args+=("${args[$i]}") ;;
  esac
done
size_row() {
  "$edit" run.safetensors tampered.safetensors meta "$1" "$2" || fail "edit_checkpoint meta $1 $2 failed"
  set +e
  /usr/bin/time -f %M -o peak.txt "$bin" "${resume_args[@]}" --steps 5 --resume tampered.safetensors > tampered.out 2> tampered.err
  local code=$?
  set -e
  [ "$code" -eq 2 ] || fail "$program: metadata $1 $2 gave exit code $code, not 2: $(head -c 400 tampered.err)"
  grep -qF -- "--resume tampered.safetensors: the model its metadata describes" tampered.err ||
    fail "$program: metadata $1 $2: the message does not name the file and its metadata: $(head -c 400 tampered.err)"
  local peak_kb
  peak_kb="$(tail -n 1 peak.txt)"
  [ "$peak_kb" -lt $((peak_mb * 1024)) ] ||
    fail "$program: metadata $1 $2 took $((peak_kb / 1024)) MB before the refusal (at most $peak_mb MB)"
  echo "metadata $1 $2: refused at $((peak_kb / 1024)) MB"
  rows=$((rows + 1))
}
size_row ff 1048576   # the top of --ff's range
if [ "$program" = gpt ]; then
  size_row seq_len 4000000   # GPT-2's learned positions: a row per position
  size_row d_model 2048     # within any machine's memory estimate: the limit, not the estimate, refuses it
  # sizes that do not fit together, none given as an option: the message names the metadata
  "$edit" run.safetensors tampered.safetensors meta heads 1 || fail "edit_checkpoint meta heads 1 failed"
  set +e
  "$bin" "${resume_args[@]}" --steps 5 --resume tampered.safetensors > tampered.out 2> tampered.err
  code=$?
  set -e
  [ "$code" -eq 2 ] && grep -qF -- "--resume: the checkpoint's metadata: 2 key/value heads do not divide the 1 query heads" \
    tampered.err || fail "$program: metadata heads 1 gave exit code $code and: $(head -c 400 tampered.err)"
  rows=$((rows + 1))
fi

# ---- spelling: names no program writes, that read as a real one -----------------------------------
row refuse "'param_groups.00.lr'" copy optim.param_groups.0.lr optim.param_groups.00.lr
row refuse "'param_groups. 0.lr'" copy optim.param_groups.0.lr "optim.param_groups. 0.lr"
row refuse "'param_groups.0.lr junk'" copy optim.param_groups.0.lr "optim.param_groups.0.lr junk"
row refuse "'state.00.exp_avg'" copy optim.state.0.exp_avg optim.state.00.exp_avg
row refuse "'base_lrs.00'" copy sched.base_lrs.0 sched.base_lrs.00
row refuse "unexpected keys: $module_name " copy "$weight" "$weight "
# ---- extra: entries no part of the run reads ------------------------------------------------------
row refuse "unexpected entry 'junk'" add loader.junk 1
row refuse "unexpected entry 'stray'" add stray 1
row refuse "unexpected key state.0.junk" add optim.state.0.junk 1
row refuse "unexpected entry 'rng.ranks.state'" rows rng.default.state rng.ranks.state 1
row refuse "unexpected entry 'rng.ranks.junk0'" junk rng.ranks.junk 100000
# ---- missing --------------------------------------------------------------------------------------
row refuse "'param_groups.0.lr' is missing" remove optim.param_groups.0.lr
row refuse "state.0.exp_avg_sq is missing" remove optim.state.0.exp_avg_sq
row refuse "missing keys: $module_name" remove "$weight"
row refuse "'epoch' is missing" remove loader.epoch
row refuse "'state' is missing" remove rng.default.state
row refuse "'train.step' is missing" remove train.step
# ---- another format: refused naming both and the release that reads it (run_state.h) ----------------
row refuse "the checkpoint is of format 1, and this program reads format 2 only: cppgrad 0.1.0 reads format 1" \
  meta checkpoint_format 1
row refuse "the checkpoint is of format 3, newer than this program's 2" meta checkpoint_format 3
# ---- non-finite, or beyond what training reaches ---------------------------------------------------
row refuse "'$module_name' holds nan" set1 "$weight" nan
row refuse "'$module_name' holds inf" set1 "$weight" inf
row refuse "'$weight' holds 1.0000000150474662e+30" set1 "$weight" 1e30
row refuse "'$weight' holds 5000" set1 "$weight" 5000  # finite, but beyond what 3 steps at these rates reach
row refuse "state.0.exp_avg holds nan" set optim.state.0.exp_avg nan
row refuse "state.0.exp_avg holds 3.0000000054977558e+38" set optim.state.0.exp_avg 3e38
row refuse "state.0.exp_avg_sq holds inf" set optim.state.0.exp_avg_sq inf
row refuse "state.0.exp_avg_sq holds -1" set optim.state.0.exp_avg_sq -1
row refuse "train.loss_curve" set train.loss_curve nan
if [ "$program" = seq2seq ]; then  # the moving average of the weights
  row refuse "'0' holds nan" set1 average.0 nan
  row refuse "'average.0' holds 1.0000000150474662e+30" set average.0 1e30
  row refuse "\"average.\": ExponentialMovingAverage::load_state_dict: '0' is missing" remove average.0
fi

# ---- options against the checkpoint: one given on --resume with another value than the run's is
# refused (it was once ignored silently); one left out takes the checkpoint's (resumed.log above)
options=0
refused_option() {
  set +e
  "$bin" "${args[@]}" --steps 5 --resume run.safetensors "$@" > option.out 2> option.err
  local code=$?
  set -e
  [ "$code" -eq 2 ] || fail "$program: --resume with $* gave exit code $code, not 2: $(head -c 400 option.err)"
  grep -qF -- "$1 $2: the checkpoint's run has $1" option.err || fail "$program: $*: not named: $(cat option.err)"
  options=$((options + 1))
}
refused_option --lr 0.25
refused_option --dropout 0.5
if [ "$program" = seq2seq ]; then
  refused_option --warmup 7
  refused_option --seed 99  # it draws the task's examples
else
  # --seed also seeds sampling: another one wins, with a notice
  "$bin" "${args[@]}" --steps 5 --resume run.safetensors --seed 99 > seed.log || fail "$program: --seed 99 was refused"
  grep -q "^note: --seed 99 replaces the checkpoint's 0$" seed.log || fail "$program: no notice for --seed 99"
  refused_option --weight-decay 0.05
  refused_option --clip 0.5
fi
"$bin" "${args[@]}" --steps 5 --resume run.safetensors --lr "$("$edit" run.safetensors meta-of lr)" > /dev/null ||
  fail "$program: --resume with the checkpoint's own --lr was refused"
echo "ok: $program: $rows tampered checkpoints, each refused or stopped with its entry named; $options options" \
     "given against the checkpoint, each refused naming both values"
