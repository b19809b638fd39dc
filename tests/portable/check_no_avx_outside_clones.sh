#!/usr/bin/env bash
# No AVX instruction (a ymm or zmm register) in the library outside the functions compiled for
# AVX2/AVX-512 (runtime/simd_clones.h: names ending .arch_x86_64_v3 or .arch_x86_64_v4), which
# run only on CPUs that have them.
#   check_no_avx_outside_clones.sh LIBRARY_ARCHIVE OBJDUMP
set -euo pipefail
library=$1 objdump=${2:-objdump}
"$objdump" -d --no-show-raw-insn "$library" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $2; next }
  /%[yz]mm[0-9]/ {
    if (fn ~ /\.arch_x86_64_v[34]>:$/) { in_clones++; next }
    bad++
    if (bad <= 20) print "AVX outside a clone, in " fn ": " $0
  }
  END {
    printf "%d AVX instructions in the AVX2/AVX-512 clones, %d elsewhere\n", in_clones, bad
    if (in_clones == 0) { print "no clone holds AVX code: are the clones still built?"; exit 1 }
    exit bad > 0
  }'
