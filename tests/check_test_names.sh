#!/usr/bin/env bash
# Every doctest case becomes one CTest test named after it (doctest_discover_tests), but CMake
# reads a name holding ';' as a list: two tests, each a filter that matches no case, and each
# "passes" having run nothing. This fails on such a name, so that every case CTest lists runs.
#   check_test_names.sh DOCTEST_BINARY...
set -euo pipefail
bad=0 listed=0
for binary in "$@"; do
  names=$("$binary" --list-test-cases --no-version 2>&1 | grep -v -e '^\[doctest\]' -e '^=\+$') || true
  count=$(grep -c . <<<"$names" || true)
  [ "$count" -gt 0 ] || { echo "check_test_names: $binary lists no test case"; bad=1; }
  listed=$((listed + count))
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    echo "$(basename "$binary"): a test case name CTest would split at ';': $name"
    bad=1
  done < <(grep -F ';' <<<"$names" || true)
done
[ "$listed" -gt 0 ] || { echo "check_test_names: no test case listed"; exit 1; }
[ "$bad" -eq 0 ] || exit 1
echo "check_test_names: $listed test case names, none with ';'"
