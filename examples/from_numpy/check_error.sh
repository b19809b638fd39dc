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

# refused_data DIR WHAT PATTERN: from_numpy run on DIR exits 1 with an error line matching PATTERN
# and writes no model (WHAT names the case in a failure).
refused_data() {
  (cd "$1" && "$program" . > out.log 2> err.log)
  local code=$?
  [ "$code" -eq 1 ] || fail "$2: exit code $code, expected 1: $(cat "$1/err.log")"
  grep -q "^from_numpy: $3" "$1/err.log" || fail "$2: the error does not say so: $(cat "$1/err.log")"
  [ ! -e "$1/from_numpy.safetensors" ] || fail "$2: a model was written"
}

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
  refused_data bad "a non-finite value in $name.npy" "./$name.npy: row $row (column $column) is not a finite number"
done
"$program" "" > /dev/null 2> err.log
code=$?
[ "$code" -eq 1 ] && grep -q '^from_numpy: usage: from_numpy \[DIR\]' err.log || fail "an empty DIR: exit code $code: $(cat err.log)"

# npy_zeros FILE SHAPE COUNT: a version-1 .npy of COUNT float32 zeros of shape SHAPE ("(0, 2)",
# "(5,)"), its header padded with spaces to a multiple of 64 bytes as NumPy writes it.
npy_zeros() {
  local dict="{'descr': '<f4', 'fortran_order': False, 'shape': $2, }"
  local pad=$((63 - (10 + ${#dict}) % 64)) length
  length=$((${#dict} + pad + 1))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((length % 256)))\\x$(printf %02x $((length / 256)))"
    printf '%s%*s\n' "$dict" "$pad" ''; head -c $((4 * $3)) /dev/zero; } > "$1"
}
# Arrays of no rows, and a 1-D x: refused naming the file and its shape, no model written.
for case in "(0, 2)|0|(0, 1)|0|shape \[0, *2\]" "(5,)|5|(5, 1)|5|shape \[5\]"; do
  IFS='|' read -r x_shape x_count y_shape y_count said <<< "$case"
  rm -rf odd && mkdir odd && npy_zeros odd/x.npy "$x_shape" "$x_count" && npy_zeros odd/y.npy "$y_shape" "$y_count"
  refused_data odd "x of shape $x_shape" "./x.npy: $said, where (samples, features)"
done
echo "ok"
