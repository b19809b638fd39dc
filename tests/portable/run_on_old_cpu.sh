#!/usr/bin/env bash
# The library runs on an x86-64 CPU without AVX: a test binary under qemu-user emulating a
# Nehalem (SSE4.2, no AVX). A build with -march=native dies at its first AVX instruction there.
#   run_on_old_cpu.sh TEST_BINARY [doctest arguments...]
# OpenBLAS is told the matching core: this project's machines set OPENBLAS_CORETYPE=Haswell,
# whose kernels would fault on a Nehalem (OpenBLAS trusts the variable).
set -euo pipefail
binary=$1; shift
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: install qemu-user (scripts/setup does)"; exit 1; }
export OPENBLAS_CORETYPE=NEHALEM
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
qemu-x86_64 -cpu Nehalem "$binary" "$@" >"$log" 2>&1 || status=$?
cat "$log"
[ "$status" -eq 0 ] || { echo "run_on_old_cpu: exit status $status under qemu -cpu Nehalem"; exit 1; }
# A filter that matches nothing would pass without running anything.
grep -Eq 'test cases: +[1-9][0-9]* \| +[1-9][0-9]* passed' "$log" || { echo "run_on_old_cpu: no test case ran"; exit 1; }
