#!/usr/bin/env bash
# scripts/check_docs must reject an excerpt that silently drops a line, and accept the same
# excerpt when a `...` line marks the omission; and it must reject a called name and a qualified
# name that occur nowhere in the sources, while accepting the names beside them that do.
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
out="$(bash scripts/check_docs tests/docs/unknown_names.md 2>&1)"
rc=$?
if [[ $rc -eq 0 || "$out" != *"'no_such_function_anywhere' (called in"* || "$out" != *"'no_such_kernel_anywhere' (in \`kernels::no_such_kernel_anywhere\`)"* || "$out" != *"2 problem(s)"* ]]; then
  echo "check_docs did not refuse exactly the two unknown names (exit $rc): $out" >&2
  exit 1
fi
echo "check_docs: rejects a dropped line and unknown names, accepts a marked gap and known names"
