#!/usr/bin/env bash
# CTest check of from_numpy's error path: given a directory with x.npy but no y.npy, it prints
# x's line, then names the missing file on stderr and exits 1. stdout goes to a file, so it is
# buffered: an exception escaping main (std::terminate, abort) would lose the line printed first.
#   check_error.sh FROM_NUMPY DATA_DIR WORK_DIR
set -uo pipefail
program="$1" data="$2" dir="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/only_x" && cd "$dir" || fail "cannot make $dir"
cp "$data/x.npy" only_x/ || fail "cannot copy x.npy"

"$program" only_x > out.log 2> err.log
code=$?
echo "exit code $code"; echo "-- stdout:"; cat out.log; echo "-- stderr:"; cat err.log
[ "$code" -eq 1 ] || fail "exit code $code, expected 1"
grep -qx 'x.npy: \[512, *2\] float32' out.log || fail "the line printed before the error is missing"
[ "$(grep -c '^from_numpy: .*only_x/y\.npy' err.log)" -eq 1 ] || fail "expected one error line naming only_x/y.npy"
echo "ok"
