#!/usr/bin/env bash
# The network stages of a device-machine session: two emulated hosts (one
# GPU each) over loopback sockets beside NVIDIA's NCCL, raw TCP probes, the
# GPU's and the socket engine's shares of a message across hosts. Split out
# of device_p2p.sh, which hands it every stage it does not run itself, so
# callers name these stages there as before.
# Usage: scripts/device_net.sh SRC_DIR stage...
#   stages: netone tcpprobe netstreams netgap netwarm netoverlap netsweep netdiag netlat
#           collnet kernelnet netturn netturnload netmsgcost hoststage netnsys
# Expects device_p2p.sh's build in /tmp/fb; logs go to $OUT.
set -uo pipefail
src=$1
shift
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
b=/tmp/fb
run="$b/tools/ferry-run/ferry-run -n 2 --runtime cuda"
export NCCL_NVLS_ENABLE=0
nccl=$(find / -name libnccl.so.2 -path '*nvidia/nccl*' 2>/dev/null | head -1)
stage() { echo "=== $1 ($(date +%T))"; }
for s in "$@"; do
  case $s in
  netturn)
    # The GPU's share of a cross-host exchange's turnaround (issue 17):
    # ferry-net-turnaround at 1 MiB (the default chunk) and 256 KiB.
    stage netturn
    for sz in 1048576 262144; do timeout 60 $b/bench/ferry-net-turnaround $sz 200; done 2>&1 | tee "$out/netturn.txt"
    ;;
  netmsgcost)
    # Trap 77: what one message costs the built-in socket engine against
    # one spinning TCP stream (ping-pong), and its streaming rate, on
    # loopback without GPUs; the default helper layout, then 2 x 2.
    stage netmsgcost
    for layout in "" "NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2"; do
      echo "# layout: ${layout:-default}"
      env $layout timeout 120 $b/bench/ferry-net-msgcost --rounds ${MSGCOST_ROUNDS:-300}
    done 2>&1 | tee "$out/netmsgcost.txt"
    ;;
  netturnload)
    # Trap 75's first guess: does the GPU's share of the turnaround grow
    # while loopback TCP moves 16 streams each way (as the transport does
    # during an exchange)? ferry-net-turnaround alone, then beside
    # tcp_probe.py (8 GiB a stream: ~6 s at 20 GB/s; started first, given
    # 2 s to ramp up), then alone again.
    stage netturnload
    {
      timeout 60 $b/bench/ferry-net-turnaround 1048576 200
      timeout 120 python3 "$src/scripts/tcp_probe.py" --gib 8 --both 16 &
      sleep 2
      echo "# beside loopback TCP, 16 streams each way"
      timeout 60 $b/bench/ferry-net-turnaround 1048576 200
      wait
      timeout 60 $b/bench/ferry-net-turnaround 1048576 200
    } 2>&1 | tee "$out/netturnload.txt"
    ;;
  hoststage)
    # Staging copies GPU <-> pinned host alone, both ways, both GPUs, beside
    # CPU memcpy threads (bench/host_stage.cu).
    stage hoststage
    for args in ${HOSTSTAGE_ARGS:-"67108864 4194304 10 8" "4194304 1048576 50 8"}; do
      timeout 120 $b/bench/ferry-host-stage $args
    done
    ;;
  netnsys)
    # nsys GPU trace (memcpys, kernels) of both ranks of a sendrecv across
    # two emulated hosts (NSYS_HOSTS=1: on one host); the CSVs come back
    # whole for offline timelines.
    stage netnsys
    export NCCL_SOCKET_IFNAME=lo
    ns=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    echo "nsys: ${ns:-none}"; [ -z "$ns" ] && continue
    for sz in ${NETNSYS_SIZES:-64M 4M}; do
      timeout 150 $b/tools/ferry-run/ferry-run -n 2 --hosts ${NSYS_HOSTS:-2} --runtime cuda --timeout 140 \
        $ns profile -t cuda -o "$out/netnsys-$sz-%q{FERRY_RANK}" --force-overwrite true \
        $b/bench/ferry-bench ${NETNSYS_OP:-sendrecv} -b $sz -e $sz -w 5 -n ${NSYS_ITERS:-10} --inplace no \
        --lib $b/libnccl.so.2 >"$out/netnsys-$sz-run.log" 2>&1
      echo "netnsys $sz exit $?"; grep -E "^\[0\] +[0-9]" "$out/netnsys-$sz-run.log" | head -2
      for f in "$out"/netnsys-$sz-*.nsys-rep; do
        $ns stats -q -r cuda_gpu_trace${NSYS_API:+,cuda_api_trace} -f csv -o "${f%.nsys-rep}" "$f" >/dev/null 2>&1
        rm -f "$f" "${f%.nsys-rep}.sqlite"
      done
    done
    ls -la "$out" | grep netnsys
    ;;
  netone)
    # Two ranks as two emulated hosts (NCCL_HOSTID) on whatever GPUs there
    # are (one GPU: both ranks on it): the network path on CUDA, then
    # ferry-bench beside NVIDIA's NCCL over its socket transport (both on
    # loopback), then a raw loopback TCP probe with 1 and 4 streams.
    stage netone
    export NCCL_SOCKET_IFNAME=lo
    for c in ${NET_CASES:-alltoall stress unbatched many mixes large}; do
      FERRY_TEST_RANKS_PER_HOST=1 timeout 200 $run --timeout 190 $b/tests/mp_p2p $c >"$out/netone-$c.log" 2>&1
      echo "mp_p2p $c across hosts: exit $? $(grep -hE 'large message|FAIL' "$out/netone-$c.log" | head -3 | tr '\n' ' ')"
    done
    timeout 240 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 230 $b/bench/ferry-bench \
      sendrecv,alltoall -b ${NET_MIN:-8} -e ${NET_MAX:-1G} -f ${NET_F:-8} -w ${NET_WARMUP:-2} -n ${NET_ITERS:-5} --inplace no \
      --lib $b/libnccl.so.2 --compare "$nccl" --rounds ${NET_ROUNDS:-1} >"$out/netone-bench.txt" 2>&1
    echo "netone bench exit $?"; grep -v "^\[1\]" "$out/netone-bench.txt" | tail -34
    grep -h "via NET\|Duplicate\|WARN" "$out/netone-bench.txt" | head -4
    timeout 60 python3 "$src/scripts/tcp_probe.py" 1 4 2>&1 | tee "$out/netone-tcp.txt"
    ;;
  tcpprobe)
    # The raw loopback TCP ceiling in the shapes the socket transport uses:
    # each ';'-separated entry of TCP_PROBES is one tcp_probe.py command line
    # (default: 4 streams one way; 16 each way, the default layout of two
    # links x 4 threads x 2 sockets, with buffers of 4, 64 and 256 MiB).
    stage tcpprobe
    IFS=';' read -ra probes <<<"${TCP_PROBES:-4;--both 16;--both --span 64 16;--both --span 256 16}"
    for p in "${probes[@]}"; do
      timeout 120 python3 "$src/scripts/tcp_probe.py" $p 2>&1
    done | tee "$out/tcpprobe.txt"
    ;;
  netgap)
    # Issue 17's lead (bench/RESULTS.md session 37): across two emulated hosts
    # Ferry's alltoall moves 1.4-2.7x more bytes per direction per second
    # than its sendrecv. The same bytes each way (sendrecv of S, alltoall of
    # 2S), Ferry alone, NETGAP_ROUNDS times in turn, with the proxy's
    # per-connection time breakdown (NetStats, INFO P2P at destroy).
    stage netgap
    export NCCL_SOCKET_IFNAME=lo
    for r in $(seq 1 ${NETGAP_ROUNDS:-2}); do
      for oc in ${NETGAP_CASES:-sendrecv:16M alltoall:32M sendrecv:64M alltoall:128M}; do
        IFS=: read -r op size <<<"$oc"
        NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P timeout 120 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda \
          --timeout 110 $b/bench/ferry-bench $op -b $size -e $size -w 3 -n ${NETGAP_ITERS:-20} --inplace no -c 0 \
          --lib $b/libnccl.so.2 >"$out/netgap-$op-$size-$r.txt" 2>&1
        echo "netgap $op $size round $r: $(grep -E '^\[0\] +[0-9]' "$out/netgap-$op-$size-$r.txt" | awk '{print $7 " us, busbw " $9 " GB/s"}')"
        grep -h "p2p totals" "$out/netgap-$op-$size-$r.txt" | sed 's/.*totals://' | tr '[' '\n' | grep "net links" | sed 's/^/    /'
      done
    done
    ;;
  netwarm)
    # A fresh device machine's network path ran 2-4x slower for its first
    # minutes (session 21: the same setting gave 1.4 then 4.2 GB/s in one
    # call). Traffic across two emulated hosts for NETWARM_S seconds
    # (default 60), not recorded, before the stages that measure.
    stage netwarm
    export NCCL_SOCKET_IFNAME=lo
    end=$(($(date +%s) + ${NETWARM_S:-60}))
    while [ "$(date +%s)" -lt "$end" ]; do
      timeout 60 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 55 $b/bench/ferry-bench \
        sendrecv,alltoall -b 4M -e 64M -f 4 -w 2 -n 10 --inplace no -c 0 --lib $b/libnccl.so.2 >/dev/null 2>&1
    done
    ;;
  netstreams)
    # Issue 17's "80% of a raw probe with the same number of streams":
    # Ferry's sendrecv across two emulated hosts with N data streams each
    # way (one link, NETSTREAMS entries "N:THREADSxSOCKETS[:LINKS]"), then
    # tcp_probe.py with N streams each way over 4 MiB (cache-hot) and 64
    # MiB buffers, in turn, NETSTREAMS_ROUNDS times.
    stage netstreams
    export NCCL_SOCKET_IFNAME=lo
    for r in $(seq 1 ${NETSTREAMS_ROUNDS:-2}); do
      for e in ${NETSTREAMS:-1:1x1 4:4x1 4:2x2 16:4x2:2}; do
        IFS=: read -r n tl links <<<"$e"
        env FERRY_NET_LINKS=${links:-1} NCCL_SOCKET_NTHREADS=${tl%x*} NCCL_NSOCKS_PERTHREAD=${tl#*x} \
          timeout 120 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 110 $b/bench/ferry-bench \
          sendrecv -b ${NET_MIN:-4M} -e ${NET_MAX:-256M} -f ${NET_F:-4} -w ${NET_WARMUP:-10} -n ${NET_ITERS:-20} \
          --inplace no --lib $b/libnccl.so.2 >"$out/netstreams-$n-$tl-$r.txt" 2>&1
        echo "round $r, $n stream(s) each way ($tl x ${links:-1} link): exit $? |" \
          "$(grep -E '^\[0\] +[0-9]' "$out/netstreams-$n-$tl-$r.txt" | awk '{printf "%s %s GB/s | ", $2, $9}')"
        for span in 4 64; do timeout 120 python3 "$src/scripts/tcp_probe.py" --both --span $span "$n"; done
      done
    done 2>&1 | tee "$out/netstreams-summary.txt"
    ;;
  netoverlap)
    # Issue 17: a GEMM's slowdown beside point-to-point traffic that crosses
    # two emulated hosts (one GPU each), Ferry beside NVIDIA's NCCL (socket).
    stage netoverlap
    export NCCL_SOCKET_IFNAME=lo
    timeout 200 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 190 $b/bench/ferry-bench \
      sendrecv,alltoall -b ${NETOV_SIZE:-256M} -e ${NETOV_SIZE:-256M} --inplace no -w 2 -n 5 \
      --lib $b/libnccl.so.2 --compare "$nccl" --overlap >"$out/netoverlap.txt" 2>&1
    echo "netoverlap exit $?"; grep -v "^\[1\]" "$out/netoverlap.txt" | grep -v INFO | tail -16
    ;;
  netsweep)
    # Ferry alone across two emulated hosts (one GPU each) under each knob
    # setting of NETSWEEP ("A=1 B=2;C=3;default", ';' between settings):
    # sendrecv, alltoall and all_reduce busbw, to find what limits the
    # network path (compare with netone/collnet's NCCL numbers).
    stage netsweep
    export NCCL_SOCKET_IFNAME=lo
    # Each setting's whole output stays in netsweep-N.txt (INFO profiles).
    IFS=';' read -ra settings <<<"${NETSWEEP:-default}"
    i=0
    for setting in "${settings[@]}"; do
      envs=""; [ "$setting" = default ] || envs=$setting
      i=$((i + 1))
      env $envs timeout 120 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 110 \
        $b/bench/ferry-bench ${NETSWEEP_OPS:-sendrecv,alltoall,all_reduce} -b ${NET_MIN:-4K} -e ${NET_MAX:-256M} \
        -f ${NET_F:-4} -w ${NET_WARMUP:-2} -n ${NET_ITERS:-5} --inplace no --lib $b/libnccl.so.2 >"$out/netsweep-$i.txt" 2>&1
      echo "--- $setting: exit $?"
      grep -E "^\[0\] +[0-9]" "$out/netsweep-$i.txt" | awk '{printf "%s %s %s | ", $2, $7, $9} END {print ""}'
    done 2>&1 | tee "$out/netsweep-summary.txt"
    ;;
  netdiag)
    # Per-chunk timelines (TRACE lines of the NET subsystem, "t=... us") of
    # sendrecv and alltoall with equal message sizes (16 MiB) across two
    # emulated hosts, and one-way traffic (scatter, gather).
    stage netdiag
    export NCCL_SOCKET_IFNAME=lo
    for oc in "sendrecv 16M" "alltoall 32M" "scatter 32M" "gather 32M"; do
      set -- $oc
      NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=NET timeout 60 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 50 \
        $b/bench/ferry-bench $1 -b $2 -e $2 -w 1 -n 4 --inplace no --lib $b/libnccl.so.2 >"$out/netdiag-$1.txt" 2>&1
      echo "$1 $2: exit $? $(grep -E "^\[0\] +[0-9]+ +[0-9]+ +float" "$out/netdiag-$1.txt" | awk '{print $7, $9}')"
    done
    for w in memop kernel; do
      FERRY_USER_WAIT=$w timeout 60 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 50 \
        $b/bench/ferry-bench sendrecv,alltoall -b 4M -e 64M -f 4 -w 2 -n 5 --inplace no --lib $b/libnccl.so.2 >"$out/netdiag-wait-$w.txt" 2>&1
      echo "wait $w: $(grep -E "^\[0\] +[0-9]" "$out/netdiag-wait-$w.txt" | awk '{printf "%s %s %s | ", $2, $7, $9}')"
    done
    ;;
  netlat)
    # Where a small operation across two emulated hosts spends its time:
    # TRACE timelines of the proxy (chunk posted/done), the socket engine
    # (hand-off to helpers, helper done) for a few ops and sizes; logs
    # under $out/netlat-*.log, one per process. NETLAT_LEVEL=INFO keeps only
    # the socket helpers' statistics lines (written when a comm closes).
    # With NETLAT_SUBSYS=PROXY (no helper lines: trap 46) scripts/
    # net_timeline.py prints each process's per-message medians.
    stage netlat
    export NCCL_SOCKET_IFNAME=lo
    for oc in ${NETLAT_CASES:-sendrecv:4K alltoall:4K all_reduce:4K sendrecv:4M all_reduce:4M}; do
      IFS=: read -r op size <<<"$oc"
      # A file per process: through ferry-run's pipes the TRACE lines would
      # block their writers and distort the timeline.
      NCCL_DEBUG=${NETLAT_LEVEL:-TRACE} NCCL_DEBUG_SUBSYS=${NETLAT_SUBSYS:-NET} NCCL_DEBUG_FILE="$out/netlat-$op-$size.%p.log" \
        timeout 60 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 50 \
        $b/bench/ferry-bench $op -b $size -e $size -w 10 -n 20 --inplace no --lib $b/libnccl.so.2 >"$out/netlat-$op-$size.txt" 2>&1
      echo "$op $size: exit $? $(grep -E "^\[0\] +[0-9]+ +[0-9]+ +[a-z0-9]+ +" "$out/netlat-$op-$size.txt" | awk '{print $7 " us"}')"
      # Per-message medians from the proxy's chunk lines (PROXY subsystem):
      # wire, staging spread, turnaround after the previous receive.
      python3 "$src/scripts/net_timeline.py" --skip 10 "$out"/netlat-$op-$size.*.log 2>&1 | sed 's/^/    /'
    done
    ;;
  collnet)
    # Collectives whose ring crosses hosts (issue 18): two ranks as two
    # emulated hosts on whatever GPUs there are; correctness (every type,
    # op and size of matrix_quick; mixed groups), then busbw beside NVIDIA's
    # NCCL over its socket transport (both on loopback).
    stage collnet
    export NCCL_SOCKET_IFNAME=lo
    for c in ${COLLNET_CASES:-matrix_quick mixed}; do
      timeout 280 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 270 \
        $b/tests/mp_coll $c >"$out/collnet-$c.log" 2>&1
      echo "mp_coll $c across hosts: exit $? $(grep -hE 'verified|FAIL' "$out/collnet-$c.log" | head -3 | tr '\n' ' ')"
    done
    timeout 280 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 270 $b/bench/ferry-bench \
      ${COLLNET_OPS:-all_reduce,all_gather,reduce_scatter,broadcast} -b ${COLLNET_MIN:-${NET_MIN:-1M}} -e ${NET_MAX:-256M} \
      -f ${NET_F:-4} -w ${NET_WARMUP:-2} -n ${NET_ITERS:-5} --inplace no --lib $b/libnccl.so.2 --compare "$nccl" \
      --rounds ${NET_ROUNDS:-1} >"$out/collnet-bench.txt" 2>&1
    echo "collnet bench exit $?"; grep -v "^\[1\]" "$out/collnet-bench.txt" | grep -v INFO | tail -40
    ;;
  kernelnet)
    # Kernel p2p across hosts (issue 17): two ranks as two emulated hosts on
    # whatever GPUs there are, every message kernel p2p (NCCL_PASS_SM=0),
    # its lanes carried by the proxy; then ferry-bench sendrecv that way
    # beside the SM-free path.
    stage kernelnet
    export NCCL_SOCKET_IFNAME=lo
    for c in ${KNET_CASES:-alltoall mixes unbatched dtypes}; do
      NCCL_PASS_SM=0 timeout 200 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 190 \
        $b/tests/mp_p2p $c >"$out/kernelnet-$c.log" 2>&1
      echo "mp_p2p $c kernel p2p across hosts: exit $? $(grep -hE 'PASS|FAIL' "$out/kernelnet-$c.log" | head -3 | tr '\n' ' ')"
    done
    for mode in 0 1; do
      NCCL_PASS_SM=$mode timeout 200 $b/tools/ferry-run/ferry-run -n 2 --hosts 2 --runtime cuda --timeout 190 \
        $b/bench/ferry-bench sendrecv -b 4K -e ${KNET_MAX:-64M} -f 4 -w 2 -n 5 --inplace no \
        --lib $b/libnccl.so.2 >"$out/kernelnet-bench-$mode.txt" 2>&1
      echo "sendrecv across hosts, NCCL_PASS_SM=$mode: exit $?"; grep -E "^\[0\] +[0-9]" "$out/kernelnet-bench-$mode.txt" | tail -12
    done
    ;;
  *)
    echo "device_net.sh: unknown stage $s" >&2
    exit 3
    ;;
  esac
done
# Run on its own (not as device_p2p.sh's hand-off, which folds at its own
# end): keep what the call can bring back.
[ -n "${DEVICE_NET_FROM_P2P:-}" ] || "$(dirname "$0")/fold_logs.sh" "$out"
