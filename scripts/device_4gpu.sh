#!/usr/bin/env bash
# One call on a 4-GPU device machine (nvidia-h200-x4 / nvidia-h100-x4): what
# two GPUs cannot show. Stages in order of what they can find, each started
# only while the deadline allows; logs tarred into $OUT/logs.tgz every 10 s.
#   one:     4 ranks on one host: mp_coll matrix_quick + mixed, mp_p2p alltoall, chain,
#            stress, mixes (kernel p2p halves its lanes at 4 ranks; rings of 4)
#   hosts:   2 emulated hosts x 2 GPUs (NCCL_HOSTID): the hierarchical all-reduce
#            (mp_coll hier, forced and by the cost model), mixed groups, mp_p2p
#            alltoall and mixes with same-host and cross-host peers in one group
#   clients: the torch suite with 4 ranks ($CLIENT_MODES, $CLIENT_CASES)
#   paired:  two 2-rank torch runs at once, $PAIRED ("modeA:modeB ...", default
#            nccl-lazy:ferry-lazy) on GPUs 0-1 and 2-3, swapped every run,
#            $PAIR_RUNS (4) runs per pair, $CLIENT_CASES (pipe): ratios within runs
#   nccltests: nccl-tests -g 4, both libraries
#   bench:   ferry-bench -n 4 beside NVIDIA's NCCL, one host
#   hostbench: ferry-bench -n 4 --hosts 2 all_reduce beside NCCL (its sockets)
#   gpu:     the GPU suite (ctest -L gpu: 2-rank tests on GPUs 0-1, one-process
#            multi-GPU tests on all four)
#   a2adiag: alltoall at 16-256 MiB: copy engines alone (ferry-ce-alltoall, and
#            ferry-ce-alltoall-mp: one process per GPU, CPU- or GPU-synchronized),
#            NCCL beside Ferry, then Ferry alone under each setting of $A2A_SETTINGS
#            (VAR=value words; none by default)
# Usage: scripts/device_4gpu.sh   (DEADLINE_S, default 540; STAGES)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
deadline=$(($(date +%s) + ${DEADLINE_S:-540}))
final=${OUT:-$PWD/device-out}
o=/tmp/device-logs
mkdir -p "$o" "$final"
export OUT=$o NCCL_NVLS_ENABLE=0
snapshot() { tar czf "$final/logs.tgz.tmp" -C "$(dirname $o)" "$(basename $o)" && mv "$final/logs.tgz.tmp" "$final/logs.tgz"; }
(while sleep 10; do snapshot; done) &
ticker=$!
left() { echo $((deadline - $(date +%s))); }
nvidia-smi --query-gpu=name,driver_version --format=csv >"$o/machine.txt" 2>&1
nvidia-smi topo -m >>"$o/machine.txt" 2>&1
head -5 "$o/machine.txt"
b=/tmp/fb
nccl=$(find / -name libnccl.so.2 -path '*nvidia/nccl*' 2>/dev/null | head -1)
fr="$b/tools/ferry-run/ferry-run -n 4 --runtime cuda"

"$here/device_p2p.sh" "$src" build || { kill $ticker; snapshot; exit 1; }
echo "built, $(left) s left"
"$here/real_clients.sh" $b ntbuild >"$o/ntbuild.txt" 2>&1 &
ntb=$!
# mp: name, launcher args, binary, case, env...: one test binary run, its verdict.
mp() {
  local name=$1 args=$2 bin=$3 c=$4
  shift 4
  [ "$(left)" -gt 30 ] || { echo "$name: skipped (deadline)"; return; }
  env "$@" timeout 150 $fr $args --timeout 140 $b/tests/$bin $c >"$o/$name.log" 2>&1
  echo "$name: exit $? $(grep -hE 'verified|PASS|FAIL|WRONG|hierarch' "$o/$name.log" | head -2 | tr '\n' ' ' | cut -c1-200)"
}
for st in ${STAGES:-one hosts clients nccltests bench hostbench}; do
  echo "=== $st, $(left) s left"
  case $st in
  one)
    mp one-coll-matrix "" mp_coll matrix_quick
    mp one-coll-mixed "" mp_coll mixed
    for c in alltoall stress mixes chain; do mp one-p2p-$c "" mp_p2p $c; done
    ;;
  gpu)
    [ "$(left)" -gt 40 ] && (cd $b && timeout $(($(left) - 15)) ctest -L gpu --timeout 60 \
      --output-on-failure >"$o/ctest-gpu.log" 2>&1)
    grep -E "tests passed|Failed|\*\*\*|Not Run" "$o/ctest-gpu.log" | head -30
    ;;
  hosts)
    mp hosts-hier-forced "--hosts 2" mp_coll hier NCCL_ALGO=Tree FERRY_TEST_EXPECT_HIER=1 NCCL_SOCKET_IFNAME=lo
    mp hosts-coll-matrix "--hosts 2" mp_coll matrix_quick NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL
    mp hosts-coll-mixed "--hosts 2" mp_coll mixed NCCL_SOCKET_IFNAME=lo
    for c in alltoall mixes; do
      mp hosts-p2p-$c "" mp_p2p $c FERRY_TEST_RANKS_PER_HOST=2 NCCL_SOCKET_IFNAME=lo
    done
    ;;
  clients)
    [ "$(left)" -gt 90 ] && CLIENT_NPROC=4 CLIENT_MODES=${CLIENT_MODES:-nccl-lazy ferry-lazy} \
      CLIENT_CASES=${CLIENT_CASES:-pipe,fsdp2,ddp,a2a,batch} \
      CLIENT_SCHEDULES=${CLIENT_SCHEDULES:-GPipe,1F1B,Interleaved1F1B,DualPipeV} \
      CLIENT_CASE_TIMEOUT=60 CLIENT_TIMEOUT=200 timeout $(($(left) - 20)) "$here/real_clients.sh" $b torch
    ;;
  paired)  # two modes at once on GPUs 0-1 and 2-3 (real_clients.sh paired)
    [ "$(left)" -gt 90 ] && CLIENT_CASES=${CLIENT_CASES:-pipe} CLIENT_CASE_TIMEOUT=90 CLIENT_TIMEOUT=240 \
      timeout $(($(left) - 20)) "$here/real_clients.sh" $b paired
    ;;
  nccltests)
    wait $ntb
    [ "$(left)" -gt 60 ] && NT_ARGS=${NT_ARGS:--b 8 -e 1G -f 32 -g 4 -c 1 -n 3 -w 1} NT_TIMEOUT=25 \
      timeout $(($(left) - 15)) "$here/real_clients.sh" $b nccltests
    ;;
  bench)
    [ "$(left)" -gt 60 ] && timeout $(($(left) - 10)) $fr --timeout $(($(left) - 15)) $b/bench/ferry-bench \
      ${BENCH_OPS:-all_reduce,all_gather,reduce_scatter,alltoall,sendrecv} -b 64K -e 1G -f 16 -w 5 -n 20 \
      --inplace no --lib $b/libnccl.so.2 --compare "$nccl" >"$o/bench4.txt" 2>&1
    grep -v "^\[[123]\]" "$o/bench4.txt" | grep -v INFO | tail -45
    ;;
  hostbench)
    [ "$(left)" -gt 60 ] && NCCL_SOCKET_IFNAME=lo timeout $(($(left) - 10)) $fr --hosts 2 --timeout $(($(left) - 15)) \
      $b/bench/ferry-bench all_reduce -b 1M -e 256M -f 4 -w 2 -n 5 --inplace no --lib $b/libnccl.so.2 \
      --compare "$nccl" >"$o/hostbench4.txt" 2>&1
    grep -v "^\[[123]\]" "$o/hostbench4.txt" | grep -v INFO | tail -20
    ;;
  a2adiag)
    for sz in 67108864 4194304; do timeout 60 $b/bench/ferry-ce-alltoall $sz 20 2>&1 | tee -a "$o/ce-a2a.txt"; done
    for sz in 67108864 268435456; do
      [ -x $b/bench/ferry-ce-alltoall-mp ] && CUDA_MODULE_LOADING=EAGER timeout 60 \
        $b/bench/ferry-ce-alltoall-mp $sz 20 2>&1 | tee -a "$o/ce-a2a-mp.txt"
    done
    a2a=(timeout 60 $fr --timeout 55 $b/bench/ferry-bench alltoall -b ${A2A_MIN:-16M} -e 1G -f 4 -w 5 -n 20
      --inplace no --lib $b/libnccl.so.2)
    "${a2a[@]}" --compare "$nccl" >"$o/a2a-compare.txt" 2>&1
    grep -E "^\[0\] +[0-9]" "$o/a2a-compare.txt" | tail -6
    for setting in ${A2A_SETTINGS:-}; do
      [ "$(left)" -gt 20 ] || break
      env $setting NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P "${a2a[@]}" >"$o/a2a-$setting.txt" 2>&1
      echo "$setting: $(grep -E "^\[0\] +[0-9]" "$o/a2a-$setting.txt" | awk '{printf "%s %s us; ", $2, $7}')"
    done
    ;;
  esac
done
"$here/real_clients.sh" $b summary >/dev/null 2>&1
kill $ticker
snapshot
