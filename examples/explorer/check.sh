#!/usr/bin/env bash
# The explorer's checks: check.sh MODEL|checkpoint|errors EXPLORER DIR [SEQ2SEQ]
#   MODEL (seq2seq, gpt, gqa, rope): the page of a short run (few steps: the page is what is
#          checked, not how well the model learned), opened in headless Chromium by check_page.py,
#          which compares every drawn cell with the weights the program wrote (--numbers) and
#          hovers, clicks and looks for console errors; and the page names no file to fetch.
#   checkpoint: the same, of a seq2seq model read from a short `seq2seq --save` run.
#   errors: a text the model cannot read is refused before any training, exit 2, naming it.
set -euo pipefail
what="$1" explorer="$2" dir="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"

case "$what" in
  seq2seq) args=(--model seq2seq --steps 150 --text "2 7 1 8 2 8") ;;
  gpt) args=(--model gpt --steps 40) ;;
  gqa) args=(--model gqa --steps 40 --heads 8 --kv-heads 2) ;;
  rope) args=(--model rope --steps 100) ;;
  checkpoint)  # a model written by `seq2seq --save` (its path is the 4th argument), not trained here
    "$4" --steps 20 --d-model 32 --heads 2 --layers 1 --ff 64 --seq-len 8 --vocab 16 --threads 1 \
      --save run.safetensors >seq2seq.txt
    args=(--model seq2seq --checkpoint run.safetensors --text "3 1 12") ;;
  errors)
    refused() {  # refused "what the message must say" explorer-arguments...
      local want="$1"; shift
      local code=0
      "$explorer" "$@" --out page.html >out.txt 2>err.txt || code=$?
      if [[ $code -ne 2 || "$(cat err.txt)" != *"$want"* ]]; then
        echo "FAILED: explorer $* exited $code, stderr: $(cat err.txt) (wanted exit 2 and '$want')"; exit 1
      fi
      [[ ! -e page.html ]] || { echo "FAILED: explorer $* left a page behind"; exit 1; }
      grep -q "^training " out.txt && { echo "FAILED: explorer $* trained before refusing"; exit 1; }
      echo "refused as it should: explorer $*"
    }
    refused "'%' in --text is not among the characters" --model gpt --text "free as in 100%"
    refused "the rope model reverses 8 digits" --model rope --text 123
    refused "symbol 12 in --text is past the model's last, 9" --model seq2seq --text "3 12"
    refused "--text holds 31 symbols; seq2seq reads 1 to 30" --model seq2seq --text "1234567890123456789012345678901"
    # ...and the 30 it allows are read: the decoding stays within the decoder's 32 positions.
    "$explorer" --model seq2seq --steps 2 --text "123456789012345678901234567890" --out longest.html >out.txt 2>err.txt ||
      { echo "FAILED: explorer --text of 30 symbols, the most the refusal above allows: $(cat err.txt)"; exit 1; }
    refused "--kv-heads 3 must divide --heads 8" --model gqa --kv-heads 3
    refused "--kv-heads is not read by --model gpt" --model gpt --kv-heads 2
    refused "--steps is the checkpoint's" --model seq2seq --checkpoint "$0" --steps 10
    exit 0 ;;
  *) echo "check.sh: unknown check '$what'"; exit 1 ;;
esac

"$explorer" "${args[@]}" --out page.html --numbers numbers.json | tee out.txt
# It says when it trains, and a model read from a checkpoint is not trained again.
said_training=no; grep -q "^training " out.txt && said_training=yes
if [[ ( "$what" == checkpoint && $said_training == yes ) || ( "$what" != checkpoint && $said_training == no ) ]]; then
  echo "FAILED: explorer ${args[*]}: trained a model read from a checkpoint, or did not say it trained"; exit 1
fi
# Self-contained: no element fetches anything (the page's policy would refuse it anyway).
if grep -Eq '(src|href)=|@import|url\(' page.html; then
  echo "FAILED: the page names something to fetch:"; grep -Eo '.{30}((src|href)=|@import|url\().{30}' page.html; exit 1
fi
# Debian's python3 and its python3-websocket (scripts/setup installs both, and chromium).
[[ -x /usr/bin/python3 ]] || { echo "FAILED: /usr/bin/python3 is missing (apt-get install python3)"; exit 1; }
/usr/bin/python3 "$here/check_page.py" page.html numbers.json
