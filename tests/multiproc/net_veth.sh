#!/bin/bash
# Two ranks in two network namespaces joined by a veth pair: a real network
# link between them (no loopback), each rank on its own emulated host
# (NCCL_HOSTID), bootstrap and network engine on the veth interfaces. Runs
# one case of a test program (mp_p2p) on the host runtime.
#
# Usage: net_veth.sh PROGRAM CASE. Exit 77 (ctest: skipped) where namespaces
# cannot be made (not root, no iproute2, no veth support), with the reason.
set -u
prog=$1
case=$2
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "needs iproute2 (ip)"
tag=fv$$
nsA=${tag}a
nsB=${tag}b
cleanup() {
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$nsA" 2>/dev/null && ip netns add "$nsB" 2>/dev/null || skip "ip netns add failed"
ip link add "${tag}x" type veth peer name "${tag}y" 2>/dev/null || skip "no veth support"
ip link set "${tag}x" netns "$nsA" && ip link set "${tag}y" netns "$nsB" || skip "moving veth ends failed"
# An address block reserved for documentation (RFC 5737), inside the
# namespaces only: nothing outside them is reachable or addressed.
ip -n "$nsA" addr add 198.51.100.1/24 dev "${tag}x"
ip -n "$nsB" addr add 198.51.100.2/24 dev "${tag}y"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "${tag}x" up
ip -n "$nsB" link set "${tag}y" up
port=$((20000 + $$ % 20000))
common=(FERRY_RUNTIME=host FERRY_NRANKS=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0
  NCCL_COMM_ID=198.51.100.1:$port FERRY_BOOTSTRAP_TIMEOUT=30)
logA=$(mktemp)
logB=$(mktemp)
ip netns exec "$nsA" env "${common[@]}" FERRY_RANK=0 FERRY_DEVICE=0 NCCL_HOSTID=veth-host-a \
  NCCL_SOCKET_IFNAME="=${tag}x" timeout 120 "$prog" "$case" >"$logA" 2>&1 &
a=$!
ip netns exec "$nsB" env "${common[@]}" FERRY_RANK=1 FERRY_DEVICE=1 NCCL_HOSTID=veth-host-b \
  NCCL_SOCKET_IFNAME="=${tag}y" timeout 120 "$prog" "$case" >"$logB" 2>&1 &
b=$!
wait $a
ra=$?
wait $b
rb=$?
sed 's/^/[0] /' "$logA"
sed 's/^/[1] /' "$logB"
rm -f "$logA" "$logB"
echo "rank 0 exit $ra, rank 1 exit $rb (namespaces $nsA/$nsB, veth ${tag}x/${tag}y)"
[ $ra = 0 ] && [ $rb = 0 ]
