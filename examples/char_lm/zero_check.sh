#!/usr/bin/env bash
# char_lm --zero on 2 processes (AdamW's state sharded, ZeRO-1) against the same run unsharded:
#
#   zero_check.sh CHAR_LM DIR
#
# Sharding changes which process updates which element, not the update (each element's AdamW
# step reads only that element's gradient and moments), and the gathered optimizer state is the
# unsharded optimizer's: so the two runs' checkpoints are the same file, byte for byte; a --zero
# run resumed from its own checkpoint, or from an unsharded one, ends as the straight run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/check_lib.sh"  # fail
char_lm="$1" dir="$2"
mpirun_script="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/mpirun"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || data="$(dirname "$0")/../../README.md"
head -c 200 "$data" > small.txt
run=("$mpirun_script" 2 "$char_lm")
small=(--data small.txt --threads 1 --heads 2 --layers 1 --ff 64 --batch 8 --warmup 10 --seed 7 --d-model 32
       --seq-len 16 --eval-every 10 --sample-len 0)

"${run[@]}" "${small[@]}" --steps 40 --save plain.safetensors > plain.log
"${run[@]}" "${small[@]}" --steps 40 --zero --save zero.safetensors > zero.log
grep -q '^--zero: AdamW.s state sharded over 2 processes' zero.log || fail "the --zero run did not shard AdamW's state"
cmp plain.safetensors zero.safetensors || fail "the --zero run's checkpoint differs from the unsharded run's"

"${run[@]}" "${small[@]}" --steps 30 --zero --save half_zero.safetensors > half_zero.log
"${run[@]}" "${small[@]}" --steps 40 --zero --resume half_zero.safetensors --save resumed.safetensors > resumed.log
cmp plain.safetensors resumed.safetensors || fail "the resumed --zero run differs from the straight one"

"${run[@]}" "${small[@]}" --steps 30 --save half_plain.safetensors > half_plain.log
"${run[@]}" "${small[@]}" --steps 40 --zero --resume half_plain.safetensors --save from_plain.safetensors > from_plain.log
cmp plain.safetensors from_plain.safetensors || fail "--zero resumed from an unsharded checkpoint differs"
echo "char_lm --zero: the same checkpoints as unsharded, straight and resumed"
