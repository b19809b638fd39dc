#!/usr/bin/env bash
# CTest check of from_numpy: it exits 0, prints its four progress lines, the last loss is below
# 0.01, and it writes its model. Output goes to a file first (no pipeline), so a crash, an error
# exit or an empty output fails the check.
#   check.sh FROM_NUMPY DATA_DIR WORK_DIR
set -euo pipefail
program="$1" data="$2" dir="$3"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"

fail() { echo "FAIL: $*" >&2; exit 1; }

"$program" "$data" > run.log || fail "from_numpy exited with code $?"
cat run.log
[ "$(grep -c '^epoch *[0-9]*  loss [0-9.]*$' run.log)" -eq 4 ] || fail "expected 4 progress lines"
last=$(tail -n 1 run.log | awk '{ print $4 }')
awk -v loss="$last" 'BEGIN { exit !(loss ~ /^[0-9]+\.[0-9]+$/ && loss + 0 < 0.01) }' \
  || fail "the last loss '$last' is not below 0.01"
[ -s from_numpy.safetensors ] || fail "no model written"
echo "ok: final loss $last"
