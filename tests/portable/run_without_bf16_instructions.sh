#!/usr/bin/env bash
# The Intel Xeons this project also runs on have AVX-512 but no bfloat16 instructions. On a CPU
# that has them, such a CPU is emulated natively by capping the instruction set oneDNN may use
# (ONEDNN_MAX_CPU_ISA=AVX512_CORE): a test binary's autocast cases then run as they would there.
#   run_without_bf16_instructions.sh TEST_BINARY [doctest arguments...]
set -euo pipefail
binary=$1; shift
export ONEDNN_MAX_CPU_ISA=AVX512_CORE
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$binary" "$@" >"$log" 2>&1 || status=$?
cat "$log"
[ "$status" -eq 0 ] || { echo "run_without_bf16_instructions: exit status $status with oneDNN capped at AVX512_CORE"; exit 1; }
# A filter that matches nothing would pass without running anything.
grep -Eq 'test cases: +[1-9][0-9]* \| +[1-9][0-9]* passed' "$log" || { echo "run_without_bf16_instructions: no test case ran"; exit 1; }
