#!/usr/bin/env bash
# CTest check of the quickstart: it exits 0, prints its five progress lines, the last loss is
# below 0.01, and it writes its checkpoint. Its output goes to a file first (no pipeline), so
# a crash, an error exit or an empty output fails the check.
#   quickstart_check.sh QUICKSTART DIR
set -euo pipefail
quickstart="$1" dir="$2"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"

fail() { echo "FAIL: $*" >&2; exit 1; }

"$quickstart" > run.log || fail "quickstart exited with code $?"
cat run.log
[ "$(grep -c '^step *[0-9]*  loss [0-9.]*$' run.log)" -eq 5 ] || fail "expected 5 progress lines"
last=$(tail -n 1 run.log | awk '{ print $4 }')
awk -v loss="$last" 'BEGIN { exit !(loss ~ /^[0-9]+\.[0-9]+$/ && loss + 0 < 0.01) }' \
  || fail "the last loss '$last' is not below 0.01"
[ -s quickstart.safetensors ] || fail "no checkpoint written"
echo "ok: final loss $last"
