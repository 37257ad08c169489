#!/usr/bin/env bash
# Where a 4-GPU SM-free alltoall's time goes, on the GPU: Nsight Systems
# traces of every rank's copies and kernels (cuda_gpu_trace as CSV), for
# the copy-engine probe (ferry-ce-alltoall: one process, all GPUs) and for
# ferry-bench alltoall at $NSYS_BYTES under Ferry (each FERRY_P2P_COPY_GATE_US
# of $NSYS_GATES) and NVIDIA's NCCL. Reads nothing but the build in $1.
# Usage: scripts/nsys_a2a.sh <build dir> <out dir>   (after a build)
set -uo pipefail
b=$1
o=$2/nsys
mkdir -p "$o"
nsys=$(command -v nsys || find / -name nsys -type f -perm -u+x 2>/dev/null | grep -v host | head -1)
[ -n "$nsys" ] || { echo "nsys: not found on this machine"; exit 2; }
echo "nsys: $nsys ($($nsys --version 2>&1 | head -1))"
nccl=$(find / -name libnccl.so.2 -path '*nvidia/nccl*' 2>/dev/null | head -1)
bytes=${NSYS_BYTES:-256M}
stats() {  # report file (without .nsys-rep) -> .csv beside it
  "$nsys" stats -q -r cuda_gpu_trace -f csv -o "$1" "$1.nsys-rep" >/dev/null 2>&1
  ls "$1"*.csv 2>/dev/null | head -1
}
timeout 120 "$nsys" profile -q -t cuda -o "$o/probe" -f true $b/bench/ferry-ce-alltoall 67108864 3 >"$o/probe.txt" 2>&1
stats "$o/probe"
run() {  # name, library, env...
  local name=$1 lib=$2
  shift 2
  env "$@" timeout 150 $b/tools/ferry-run/ferry-run -n 4 --runtime cuda --timeout 140 \
    "$nsys" profile -q -t cuda -f true -o "$o/$name-r%q{FERRY_RANK}" \
    $b/bench/ferry-bench alltoall -b $bytes -e $bytes -w 3 -n 5 --inplace no --lib "$lib" \
    >"$o/$name.txt" 2>&1
  echo "$name: exit $? $(grep -E '^\[0\] +[0-9]' "$o/$name.txt" | tail -1)"
  for r in 0 1 2 3; do stats "$o/$name-r$r"; done
}
for g in ${NSYS_GATES:-0 100}; do
  run ferry-g$g $b/libnccl.so.2 FERRY_P2P_COPY_GATE_US=$g
done
run nccl "$nccl" NCCL_NVLS_ENABLE=0
rm -f "$o"/*.nsys-rep "$o"/*.sqlite
ls -la "$o" | head -30
