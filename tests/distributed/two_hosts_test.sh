#!/usr/bin/env bash
# two_hosts_test.sh NETNS PROGRAM: an MPI job across two "machines" of this one, two network
# namespaces joined by a virtual Ethernet pair (scripts/netns --hosts 2: a hostfile, TCP only,
# the interfaces chosen by subnet), one rank in each. Checks that the ranks really are apart
# (different namespaces, each with its own address), then runs the collectives' test cases
# across the link. Where namespaces cannot be made (not root, a container without
# CAP_SYS_ADMIN), scripts/netns says why and exits 77, which CTest reports as skipped.
set -uo pipefail
netns="$1" program="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
export MPIRUN_TIMEOUT=60

output=$(timeout 90 "$netns" --hosts 2 2 /bin/sh -c \
  'echo "rank $OMPI_COMM_WORLD_RANK: $(readlink /proc/self/ns/net) $(ip -4 -o addr show | grep -o "10\.77\.0\.[0-9]*")"' 2>&1)
code=$?
echo "$output"
[ "$code" -eq 77 ] && exit 77
[ "$code" -eq 0 ] || fail "the job across two namespaces exited $code"
rank0=$(grep "^rank 0:" <<< "$output") || fail "rank 0 did not run"
rank1=$(grep "^rank 1:" <<< "$output") || fail "rank 1 did not run"
grep -q " 10.77.0.1$" <<< "$rank0" || fail "rank 0 is not on 10.77.0.1"
grep -q " 10.77.0.2$" <<< "$rank1" || fail "rank 1 is not on 10.77.0.2"
[ "$(cut -d' ' -f3 <<< "$rank0")" != "$(cut -d' ' -f3 <<< "$rank1")" ] || fail "both ranks share one network namespace"

timeout 90 "$netns" --hosts 2 2 "$program" "--test-case=collectives*" || fail "the collectives failed across the link"
echo "ok"
