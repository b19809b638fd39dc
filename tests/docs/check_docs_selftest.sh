#!/usr/bin/env bash
# scripts/check_docs must reject an excerpt that silently drops a line, and accept the same
# excerpt when a `...` line marks the omission.
set -uo pipefail
root="$1"
cd "$root" || exit 1
out="$(bash scripts/check_docs tests/docs/dropped_line.md 2>&1)"
rc=$?
if [[ $rc -eq 0 || "$out" != *"not adjacent"* ]]; then
  echo "check_docs accepted an excerpt with a dropped line (exit $rc): $out" >&2
  exit 1
fi
bash scripts/check_docs tests/docs/marked_gap.md || { echo "check_docs rejected a marked gap" >&2; exit 1; }
echo "check_docs: rejects a dropped line, accepts a marked gap"
