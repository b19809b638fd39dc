#!/usr/bin/env bash
# Every doctest case becomes one CTest test named after it (doctest_discover_tests), but CMake
# reads a name holding ';' as a list: two tests, each a filter that matches no case, and each
# "passes" having run nothing. A '[' without its ']' (or the reverse) is as bad: CMake keeps the
# ';' between brackets, so the names after it would merge into one. This fails on either, so
# that every case CTest lists runs.
#   check_test_names.sh DOCTEST_BINARY...
set -euo pipefail
bad=0 listed=0
for binary in "$@"; do
  names=$("$binary" --list-test-cases --no-version 2>&1 | grep -v -e '^\[doctest\]' -e '^=\+$') || true
  count=$(grep -c . <<<"$names" || true)
  [ "$count" -gt 0 ] || { echo "check_test_names: $binary lists no test case"; bad=1; }
  listed=$((listed + count))
  # Each name at fault, with why (awk counts the brackets: gsub returns how many it replaced).
  faults=$(awk '/;/ { print "a name CTest would split at \x27;\x27: " $0; next }
                { line = $0; o = gsub(/\[/, "", line); c = gsub(/\]/, "", line)
                  if (o != c) print "a name with unmatched square brackets, which CMake lists read: " $0 }' <<<"$names")
  if [ -n "$faults" ]; then
    sed "s|^|$(basename "$binary"): |" <<<"$faults"
    bad=1
  fi
done
[ "$listed" -gt 0 ] || { echo "check_test_names: no test case listed"; exit 1; }
[ "$bad" -eq 0 ] || exit 1
echo "check_test_names: $listed test case names, none with ';' or unmatched brackets"
