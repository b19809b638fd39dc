#!/usr/bin/env bash
# CTest checks of the seq2seq example:
#   check.sh smoke   SEQ2SEQ DIR   a few steps of a tiny model: the loss falls, --save, --plot and
#                                  --attention write valid files, and the checkpoint resumes
#   check.sh resume  SEQ2SEQ DIR   20 steps, save, resume to 40 == 40 steps straight, byte for byte
#   check.sh learns  SEQ2SEQ DIR   a small copy task reaches >= 99% sequence accuracy in 400 steps
set -euo pipefail
mode="$1" seq2seq="$2" dir="$3"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
tiny=(--threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 16 --seq-len 6 --vocab 10 --seed 7)

fail() { echo "FAIL: $*" >&2; exit 1; }

# An SVG a browser opens: it starts as XML or <svg, ends with </svg>, and parses when xmllint exists.
check_svg() {
  [ -s "$1" ] || fail "$1 is missing or empty"
  head -c 200 "$1" | grep -q '<svg\|<?xml' || fail "$1 does not start as an SVG"
  tail -c 20 "$1" | grep -q '</svg>' || fail "$1 does not end with </svg>"
  if command -v xmllint > /dev/null; then xmllint --noout "$1" || fail "$1 is not well-formed XML"; fi
}

# The loss of the first and the last progress line (whatever they print: a "nan" must fail the
# numeric check below, not be skipped).
losses() { grep -o '^step *[0-9]*/[0-9]*  loss [^ ]*' "$1" | awk 'NR == 1 { first = $NF } { last = $NF } END { print first, last }'; }

case "$mode" in
  smoke)
    "$seq2seq" "${tiny[@]}" --steps 60 --eval-every 30 --save run.safetensors --plot loss.svg \
      --attention attention.svg > run.log
    read -r first last < <(losses run.log)
    # (a process substitution's failure is not seen by set -e: an empty result must fail here)
    [[ "$first" =~ ^[0-9.]+$ && "$last" =~ ^[0-9.]+$ ]] || fail "no loss in the progress lines of run.log"
    echo "loss $first -> $last"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || fail "the loss did not fall: $first -> $last"
    grep -q 'sequence accuracy' run.log || fail "no accuracy line"
    [ -s run.safetensors ] || fail "no checkpoint"
    check_svg loss.svg
    check_svg attention.svg
    grep -q 'encoder.layers.0.self_attn' attention.svg || fail "the heat maps do not name their layers"
    "$seq2seq" "${tiny[@]}" --steps 70 --eval-every 30 --resume run.safetensors > resumed.log
    grep -q 'resumed from run.safetensors at step 60' resumed.log || fail "the checkpoint did not resume"
    # bad values: a one-line error and exit code 2
    set +e
    "$seq2seq" --heads 3 --steps 1 > bad.log 2>&1; code=$?
    set -e
    [ "$code" -eq 2 ] || fail "--heads 3 with d_model 128 gave exit code $code, not 2"
    [ "$(wc -l < bad.log)" -eq 1 ] && grep -q '^seq2seq: .*128.*3' bad.log \
      || fail "--heads 3: the error is not one line naming d_model and heads: $(cat bad.log)"
    set +e
    "$seq2seq" --steps 0 > bad.log 2>&1; code=$?
    set -e
    [ "$code" -eq 2 ] && [ "$(wc -l < bad.log)" -eq 1 ] && grep -q -- '--steps' bad.log \
      || fail "--steps 0 gave exit code $code and: $(cat bad.log)"
    ;;
  resume)
    "$seq2seq" "${tiny[@]}" --steps 40 --eval-every 10 --save straight.safetensors > straight.log
    "$seq2seq" "${tiny[@]}" --steps 20 --eval-every 10 --save half.safetensors > half.log
    "$seq2seq" "${tiny[@]}" --steps 40 --eval-every 10 --resume half.safetensors --save resumed.safetensors > resumed.log
    # the checkpoints hold the weights, the optimizer's moments, the schedule, the RNG states and
    # every step's training loss: identical files mean the resumed run continued exactly
    cmp straight.safetensors resumed.safetensors || fail "resumed run differs from the straight one"
    grep -q 'step *40/40  loss [0-9.]*' resumed.log || fail "the resumed run printed no step 40"
    diff <(grep -o 'step *[0-9]*/40  loss [0-9.]*' straight.log | tail -n 2) \
         <(grep -o 'step *[0-9]*/40  loss [0-9.]*' resumed.log) || fail "the printed losses differ"
    ;;
  learns)
    "$seq2seq" --threads 1 --task copy --d-model 64 --heads 4 --layers 1 --ff 128 --batch 32 --seq-len 5 --vocab 8 \
      --dropout 0 --warmup 100 --lr 0.5 --steps 400 --eval-every 100 --seed 1 > run.log
    tail -n 1 run.log
    accuracy=$(grep -o 'sequence accuracy on [0-9]* held-out sequences: [0-9.]*' run.log | awk '{ print $NF }')
    awk -v a="$accuracy" 'BEGIN { exit !(a >= 99.0) }' || fail "copy reached only $accuracy% in 400 steps"
    ;;
  *) fail "unknown mode $mode" ;;
esac
echo "ok: $mode"
