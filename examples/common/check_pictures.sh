#!/usr/bin/env bash
# Renders every picture the example programs write to PNG, as a reader would see it, and checks
# each: rsvg-convert (Debian: librsvg2-bin) reads the SVG, the PNG has the size the SVG declares,
# and it is not blank: many distinct colours (anti-aliased text), a share of ink, and the
# colours of the data (blue attention cells and training loss, red held-out curve).
#
#   check_pictures.sh SEQ2SEQ CHAR_LM PNG_STATS DIR GPT
set -euo pipefail
seq2seq="$1" char_lm="$2" png_stats="$3" dir="$4" gpt="$5"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v rsvg-convert > /dev/null || fail "rsvg-convert is missing (Debian package librsvg2-bin; scripts/setup installs it)"

# Small models, a few steps: the pictures, not the learning, are under test.
"$seq2seq" --threads 1 --d-model 32 --heads 2 --layers 2 --ff 64 --batch 16 --seq-len 8 --vocab 10 --seed 7 \
  --steps 60 --eval-every 20 --plot seq2seq_curves.svg --attention seq2seq_attention.svg > seq2seq.log
"$seq2seq" --threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 16 --seq-len 8 --vocab 10 --seed 7 \
  --steps 20 --attention seq2seq_attention_example_3.svg --attention-example 3 > seq2seq_example.log
grep -q 'held-out example 3 ' seq2seq_attention_example_3.svg || fail "--attention-example 3 did not draw example 3"
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || data="$(dirname "$0")/../../README.md"
"$char_lm" --data "$data" --threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 8 --seq-len 16 --warmup 10 \
  --seed 7 --steps 60 --eval-every 20 --sample-len 0 --plot char_lm_curves.svg > char_lm.log
"$gpt" --data "$data" --threads 1 --size tiny --d-model 32 --seq-len 32 --batch 8 --bpe-vocab 320 --seed 7 \
  --steps 60 --eval-every 20 --sample-len 0 --plot gpt_curves.svg > gpt.log

# check NAME.svg MIN_BLUE MIN_RED: render, then compare the PNG with the SVG's declared size
# and count its pixels. Shares are of all pixels.
check() {
  local svg="$1.svg" png="$1.png" min_blue="$2" min_red="$3"
  [ -s "$svg" ] || fail "$svg was not written"
  rsvg-convert "$svg" -o "$png" || fail "rsvg-convert cannot render $svg"
  local declared
  declared=$(head -c 400 "$svg" | sed -n 's/^<svg [^>]*width="\([0-9]*\)" height="\([0-9]*\)".*/\1 \2/p')
  [ -n "$declared" ] || fail "$svg declares no width and height in px"
  read -r width height colours ink blue red < <("$png_stats" "$png")
  echo "$png: ${width}x${height}, $colours colours, ink $ink, blue $blue, red $red"
  [ "$width $height" = "$declared" ] || fail "$png is ${width}x${height}, the SVG declares ${declared/ /x}"
  [ "$width" -ge 300 ] && [ "$height" -ge 200 ] || fail "$png is too small to read: ${width}x${height}"
  [ "$colours" -ge 100 ] || fail "$png has only $colours distinct colours: blank, or no text"
  awk -v v="$ink" 'BEGIN { exit !(v >= 0.01 && v <= 0.6) }' || fail "$png: ink covers $ink of it, not 1% to 60%"
  awk -v v="$blue" -v m="$min_blue" 'BEGIN { exit !(v >= m) }' || fail "$png: blue covers $blue, under $min_blue"
  awk -v v="$red" -v m="$min_red" 'BEGIN { exit !(v >= m) }' || fail "$png: red covers $red, under $min_red"
}
check seq2seq_curves 0.001 0.0005            # the training loss, blue; the held-out loss and accuracy, red
check seq2seq_attention 0.02 0               # the maps' cells
check seq2seq_attention_example_3 0.02 0
check char_lm_curves 0.001 0.0005
check gpt_curves 0.001 0.0005
echo "ok: every picture renders"
