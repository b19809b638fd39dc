#!/usr/bin/env bash
# The cloned loops give the same bits whichever clone runs (runtime/simd_clones.h): the unary
# rows' digest (tests/tensor/test_unary_floats.cpp) printed natively, under qemu-user emulating
# a Haswell (AVX2 and FMA: the x86-64-v3 clone) and a Nehalem (SSE4.2: the baseline clone, whose
# std::fma is libm's), and compared. At least two different clones must have run.
#   same_bits_in_every_clone.sh TENSOR_TESTS_BINARY
set -euo pipefail
binary=$1
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: install qemu-user (scripts/setup does)"; exit 1; }
args=("--test-case=unary floats: a digest*" --no-skip)
lines=()
run() {  # run COMMAND...: the binary run under COMMAND; keeps the digest line it prints
  local out
  out=$("$@" "$binary" "${args[@]}" 2>&1) || { echo "$out"; echo "same_bits_in_every_clone: the run under '$*' failed"; exit 1; }
  local line
  line=$(grep -m1 '^unary floats: clone ' <<<"$out") || { echo "$out"; echo "same_bits_in_every_clone: no digest from the run under '$*'"; exit 1; }
  echo "$line"
  lines+=("$line")
}
run env
run env OPENBLAS_CORETYPE=HASWELL qemu-x86_64 -cpu Haswell
run env OPENBLAS_CORETYPE=NEHALEM qemu-x86_64 -cpu Nehalem
clones=$(printf '%s\n' "${lines[@]}" | awk '{print $4}' | sort -u | wc -l)
digests=$(printf '%s\n' "${lines[@]}" | awk '{print $6}' | sort -u | wc -l)
[ "$clones" -ge 2 ] || { echo "same_bits_in_every_clone: only one clone ran"; exit 1; }
[ "$digests" -eq 1 ] || { echo "same_bits_in_every_clone: the clones' digests differ"; exit 1; }
echo "same_bits_in_every_clone: $clones clones, one digest"
