#!/usr/bin/env bash
# A test binary's cases as they run on another x86-64 CPU:
#   old-cpu   under qemu-user emulating a Nehalem (SSE4.2, no AVX): a build with -march=native
#             dies at its first AVX instruction there. OpenBLAS is told the matching core (this
#             project's machines set OPENBLAS_CORETYPE=Haswell, whose kernels would fault there).
#   no-bf16   natively, with oneDNN capped at AVX-512 without bfloat16 (ONEDNN_MAX_CPU_ISA):
#             the Intel Xeons this project also runs on, which have AVX-512 but no AVX512_BF16.
#   run_as_other_cpu.sh old-cpu|no-bf16 TEST_BINARY [doctest arguments...]
set -euo pipefail
mode=$1 binary=$2
shift 2
case $mode in
  old-cpu)
    command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: install qemu-user (scripts/setup does)"; exit 1; }
    export OPENBLAS_CORETYPE=NEHALEM
    runner=(qemu-x86_64 -cpu Nehalem) ;;
  no-bf16)
    export ONEDNN_MAX_CPU_ISA=AVX512_CORE
    runner=() ;;
  *) echo "run_as_other_cpu: unknown mode '$mode' (old-cpu or no-bf16)"; exit 1 ;;
esac
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"${runner[@]}" "$binary" "$@" >"$log" 2>&1 || status=$?
cat "$log"
[ "$status" -eq 0 ] || { echo "run_as_other_cpu $mode: exit status $status"; exit 1; }
# A filter that matches nothing would pass without running anything.
grep -Eq 'test cases: +[1-9][0-9]* \| +[1-9][0-9]* passed' "$log" || { echo "run_as_other_cpu $mode: no test case ran"; exit 1; }
