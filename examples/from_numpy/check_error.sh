#!/usr/bin/env bash
# CTest check of from_numpy's error paths: given a directory with x.npy but no y.npy, it prints
# x's line, then names the missing file on stderr and exits 1. stdout goes to a file, so it is
# buffered: an exception escaping main (std::terminate, abort) would lose the line printed first.
# Given data with one NaN (in x) or one infinity (in y), or arrays of no rows, it refuses them
# before training, naming the file (and the row), exits 1 and writes no model; an empty DIR, which
# would read /x.npy, is refused too.
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

# set_float32 FILE INDEX HEX: the INDEX-th float32 of a version-1 .npy file's data becomes the
# little-endian bytes HEX (its header: 10 bytes, then as many as bytes 8-9 say).
set_float32() {
  local header_len
  header_len=$(od -An -tu2 -j8 -N2 "$1" | tr -d ' ')
  printf "$3" | dd of="$1" bs=1 seek=$((10 + header_len + 4 * $2)) conv=notrunc status=none
}
for case in "x 15 \\x00\\x00\\xc0\\x7f 7 1" "y 300 \\x00\\x00\\x80\\x7f 300 0"; do
  read -r name index bytes row column <<< "$case"
  rm -rf bad && mkdir bad && cp "$data/x.npy" "$data/y.npy" bad/
  set_float32 "bad/$name.npy" "$index" "$bytes"
  (cd bad && "$program" . > out.log 2> err.log)
  code=$?
  [ "$code" -eq 1 ] || fail "a non-finite value in $name.npy: exit code $code, expected 1"
  grep -q "^from_numpy: ./$name.npy: row $row (column $column) is not a finite number" bad/err.log ||
    fail "a non-finite value in $name.npy: the error does not name its row: $(cat bad/err.log)"
  [ ! -e bad/from_numpy.safetensors ] || fail "a non-finite value in $name.npy: a model was written"
done
"$program" "" > /dev/null 2> err.log
code=$?
[ "$code" -eq 1 ] && grep -q '^from_numpy: usage: from_numpy \[DIR\]' err.log || fail "an empty DIR: exit code $code: $(cat err.log)"

# npy_no_rows FILE COLUMNS: a version-1 .npy of float32 of shape (0, COLUMNS), its header padded
# with spaces to a multiple of 64 bytes as NumPy writes it.
npy_no_rows() {
  local dict="{'descr': '<f4', 'fortran_order': False, 'shape': (0, $2), }"
  local pad=$((63 - (10 + ${#dict}) % 64)) length
  length=$((${#dict} + pad + 1))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((length % 256)))\\x$(printf %02x $((length / 256)))"
    printf '%s%*s\n' "$dict" "$pad" ''; } > "$1"
}
rm -rf none && mkdir none && npy_no_rows none/x.npy 2 && npy_no_rows none/y.npy 1
(cd none && "$program" . > out.log 2> err.log)
code=$?
[ "$code" -eq 1 ] || fail "arrays of no rows: exit code $code, expected 1: $(cat none/err.log)"
grep -q '^from_numpy: ./x.npy: shape \[0, *2\], where (samples, features)' none/err.log ||
  fail "arrays of no rows: the error does not say so: $(cat none/err.log)"
[ ! -e none/from_numpy.safetensors ] || fail "arrays of no rows: a model was written"
echo "ok"
