#!/usr/bin/env bash
# One device-machine session for SM-free p2p: build with CUDA, the GPU suite,
# compute-sanitizer on a short run, and ferry-bench side by side with NVIDIA's
# NCCL (torch's wheel). Every stage has its own time limit; logs go to $OUT.
# Usage: scripts/device_p2p.sh SRC_DIR [stages...]
#   stages: build gpu gpulazy diag lazy lazy2 lazy3 sanitize bench overlap torch
#           coll collbench kp2p memop memopgdb memopsuite waitsuite floor alias pieces nostage kmax lanes collsan llsweep
#           lllanes firstuse p2psan copyov cesplit callcost lcostprof loadsync zerosmcond memory p2psweep
#           wincoll copysm shmcoll; any other stage goes to scripts/device_net.sh (the
#           network stages: netone collnet netsweep netlat ...), in order
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$1
shift
stages=${*:-build gpu sanitize bench overlap}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
b=/tmp/fb
gtest=$(cd "$src" && pwd)/.deps/googletest
[ -d "$gtest" ] || gtest=$(cd "$src/.." && pwd)/.deps/googletest
export NCCL_NVLS_ENABLE=0
nccl=$(find / -name libnccl.so.2 -path '*nvidia/nccl*' 2>/dev/null | head -1)
run="$b/tools/ferry-run/ferry-run -n 2 --runtime cuda"
stage() { echo "=== $1 ($(date +%T))"; }
# Ferry alone (no NCCL), out of place: prints "size time_us busbw" per row of
# rank 0. Knobs come from the caller's environment: VAR=x ferryOnly ops args.
ferryOnly() {
  local ops=$1
  shift
  timeout 60 $run --timeout 55 $b/bench/ferry-bench "$ops" "$@" --inplace no --lib $b/libnccl.so.2 2>&1 |
    grep -E "^\[0\] +[0-9]" | awk '{print $2, $7, $9}'
}
# ferry-launch-cost's 2-rank line (rank 0's "submit" and, with FERRY_PROFILE,
# every rank's CPU profile) for library $1, op $2, $3 bytes.
launchCost() {
  timeout 60 $run --timeout 55 $b/bench/ferry-launch-cost --lib "$1" --op "$2" --bytes "$3" 2>&1 |
    grep -E "submit|CPU profile" | sed "s|$b/libnccl.so.2|Ferry|; s|$nccl|NCCL|"
}
for s in $stages; do
  case $s in
  build)
    stage build
    cmake -S "$src" -B $b -G Ninja -DFERRY_CUDA=ON -DFERRY_KERNEL_TYPES=${KTYPES:-all} -DFERRY_GTEST_SRC="$gtest" >"$out/cmake.log" 2>&1 &&
      timeout 300 ninja -C $b -j 30 ${FERRY_TARGETS:-} >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -20; exit 1; }
    ;;
  gpu)
    stage gpu
    (cd $b && timeout ${GPU_STAGE_TIMEOUT:-240} ctest -L gpu -E "${GPU_EXCLUDE:-^$}" --timeout 120 --output-on-failure 2>&1 >"$out/ctest-gpu.log"
     grep -E "Test +#|tests passed|PASS lazy|lazy_loading|large message|FAIL" "$out/ctest-gpu.log" | tail -40)
    grep -h "completed in\|large message" "$out/ctest-gpu.log" | head -12
    ;;
  diag)
    stage diag
    (cd $b && timeout 60 ctest -R "RuntimeCudaZc|runtime.cuda.zc" --timeout 25 2>&1 | grep -E "Test +#|tests passed")
    for v in "memop 1 alltoall" "memop 0 alltoall" "memop 1 mixes" "kernel 1 alltoall"; do
      set -- $v
      echo "--- EAGER FERRY_USER_WAIT=$1 FERRY_P2P_STREAM_WAIT=$2 $3"
      CUDA_MODULE_LOADING=EAGER FERRY_USER_WAIT=$1 FERRY_P2P_STREAM_WAIT=$2 NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=P2P \
        timeout 25 $run --timeout 20 $b/tests/mp_p2p $3 >"$out/diag-$1-$2-$3.log" 2>&1
      echo "exit $?"; grep -E "PASS|FAIL|WARN" "$out/diag-$1-$2-$3.log" | head -4
      grep -E "TRACE" "$out/diag-$1-$2-$3.log" | tail -4 | cut -c1-220
    done
    ;;
  lazy)
    stage lazy
    for v in "LAZY auto" "EAGER auto"; do
      set -- $v
      CUDA_MODULE_LOADING=$1 FERRY_USER_WAIT=$2 NCCL_DEBUG=WARN timeout 25 $run --timeout 20 $b/tests/gpu_p2p_lazy 2>&1 | tail -8
    done
    ;;
  lazy2)
    stage lazy2
    for zc in 0 1; do
      echo "--- LAZY FERRY_P2P_ZERO_COPY=$zc"
      CUDA_MODULE_LOADING=LAZY FERRY_P2P_ZERO_COPY=$zc timeout 18 $run --timeout 15 $b/tests/gpu_p2p_lazy 2>&1 | grep -E "rank|timeout" | tail -6
    done
    ;;
  lazy3)
    stage lazy3
    CUDA_MODULE_LOADING=LAZY timeout 25 $run --timeout 20 $b/tests/gpu_p2p_lazy 2>&1 | grep -E "PASS|FAIL|timeout" | tail -4
    CUDA_MODULE_LOADING=LAZY timeout 40 $run --timeout 35 $b/tests/mp_p2p alltoall 2>&1 | grep -E "PASS|FAIL|timeout" | tail -4
    ;;
  coll)
    stage coll
    (cd $b && timeout 280 ctest -R "gpu.coll|gpu.p2p.*kernel" --timeout 120 2>&1 >"$out/ctest-coll.log"
     grep -E "Test +#|tests passed" "$out/ctest-coll.log" | tail -20)
    grep -h "FAIL" "$out/ctest-coll.log" | head -10
    ;;
  collbench)
    stage collbench
    timeout 280 $run --timeout 270 $b/bench/ferry-bench all_reduce,all_gather,reduce_scatter,broadcast,reduce \
      -b 8 -e ${COLLBENCH_MAX:-4G} -f 8 -w 3 -n 10 --inplace no --lib $b/libnccl.so.2 --compare "$nccl" \
      --json "$out/collbench.json" >"$out/collbench.txt" 2>&1
    echo "collbench exit $?"; grep -v "^\[1\]" "$out/collbench.txt" | grep -v INFO | tail -75
    ;;
  kp2p)
    stage kp2p
    NCCL_PASS_SM=0 timeout 150 $run --timeout 140 $b/bench/ferry-bench sendrecv,alltoall \
      -b 8 -e 1G -f 8 -w 3 -n 10 --inplace no --lib $b/libnccl.so.2 --compare "$nccl" \
      >"$out/kp2p.txt" 2>&1
    echo "kp2p exit $?"; grep -v "^\[1\]" "$out/kp2p.txt" | grep -v INFO | tail -32
    ;;
  loadsync)
    # What a kernel/module load or cudaMalloc does while a stream wait is
    # pending, and whether another thread's copy + write-value still runs.
    stage loadsync
    for mode in LAZY EAGER; do
      for w in spin memop; do
        for a in launch modload malloc; do
          for r in copy host; do
            CUDA_MODULE_LOADING=$mode timeout 8 $b/bench/ferry-load-sync $w $a $r 2>&1 | tail -1 |
              tee -a "$out/loadsync.txt"
          done
        done
      done
    done
    ;;
  memop)
    stage memop
    for v in "mixes" "alltoall" "unbatched"; do
      echo "--- memop $v"
      CUDA_MODULE_LOADING=EAGER FERRY_USER_WAIT=memop timeout 40 $run --timeout 35 $b/tests/mp_p2p $v 2>&1 | grep -E "PASS|FAIL|timeout" | head -3
    done
    ;;
  memopgdb)
    # The memop hang: run mp_p2p with memop user waits, and once it has hung,
    # dump every thread's stack of both ranks plus the P2P trace tail.
    stage memopgdb
    command -v gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null
    for v in ${MEMOP_CASES:-"1 alltoall" "0 alltoall"}; do
      set -- $v
      log="$out/memopgdb-$1-$2.log"
      echo "--- memop FERRY_P2P_STREAM_WAIT=$1 $2"
      CUDA_MODULE_LOADING=EAGER FERRY_USER_WAIT=memop FERRY_P2P_STREAM_WAIT=$1 NCCL_DEBUG=TRACE \
        NCCL_DEBUG_SUBSYS=P2P timeout 40 $run --timeout 38 $b/tests/mp_p2p $2 >"$log" 2>&1 &
      sleep 12
      for pid in $(pgrep -x mp_p2p); do
        echo "pid $pid $(tr '\0' ' ' </proc/$pid/cmdline | cut -c1-80)"
        timeout 20 gdb -p $pid -batch -ex "thread apply all bt 14" 2>/dev/null |
          grep -E "^Thread|^#" | grep -vE "libc.so|pthread_cond|__GI|futex" | cut -c1-200 | head -60
      done
      wait
      echo "exit $?"; grep -E "PASS|FAIL" "$log" | head -3; grep TRACE "$log" | tail -6 | cut -c1-240
    done
    ;;
  memopsuite | waitsuite)
    # The SM-free GPU suite and the lazy-loading scenario with the user waits
    # of FERRY_USER_WAIT=$SUITE_WAIT (waitsuite: default kernel, the spin
    # kernel the default no longer uses; memopsuite: memop), under both
    # module-loading modes; gpu.multidev too: peers in one process release
    # each other's waits with write-values from their own streams, the case
    # trap 22's probe deadlocked under lazy loading.
    stage $s
    w=memop
    [ $s = waitsuite ] && w=${SUITE_WAIT:-kernel}
    (cd $b && timeout 30 ctest -R "RuntimeCudaZc" --timeout 25 2>&1 | grep -E "Failed|tests passed")
    for mode in LAZY EAGER; do
      echo "--- $mode $w"
      (cd $b && CUDA_MODULE_LOADING=$mode FERRY_USER_WAIT=$w timeout 150 \
        ctest -R "gpu.p2p|gpu.coll.mixed|gpu.coll.graph|gpu.multidev" -E "${MEMOP_EXCLUDE:-large}" --timeout 40 \
        >"$out/$s-$mode.log" 2>&1
       grep -E "Failed|Timeout|tests passed" "$out/$s-$mode.log" | head -12)
    done
    ;;
  floor)
    # The GEMM slowdown zero-SM traffic causes by itself, with GPU 0's clocks
    # and power sampled meanwhile.
    stage floor
    nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader -lms 100 >"$out/smi.log" 2>&1 &
    smi=$!
    # FLOOR_GPUS: the GPUs that run the GEMM, one run each (default 0 1: a
    # rank's slowdown in ferry-bench is the worse of the two GPUs').
    for g in ${FLOOR_GPUS:-0 1}; do
      timeout 120 $b/bench/ferry-overlap-floor 268435456 ${FLOOR_ITERS:-100} $g 2>&1 | tee "$out/floor-gpu$g.txt"
    done
    kill $smi 2>/dev/null
    awk -F', ' '$1==0 {split($2,c," "); split($3,p," "); n++; cs+=c[1]; ps+=p[1]; if (c[1]<cm||cm==0) cm=c[1]; if (p[1]>pm) pm=p[1]}
      END {printf "GPU0 sm clock avg %.0f min %.0f MHz, power avg %.0f max %.0f W (%d samples)\n", cs/n, cm, ps/n, pm, n}' "$out/smi.log"
    ;;
  copysm)
    # Which copies run on SMs rather than copy engines (trap 71).
    stage copysm
    for sz in 268435456 16777216; do timeout 60 $b/bench/ferry-copy-sm $sz; done 2>&1 | tee "$out/copysm.txt"
    ;;
  alias)
    # Is the memop hang two streams sharing one hardware queue? memop waits,
    # eager loading, with 1 and with 32 device connections; then the
    # preloaded-kernel launch test under eager loading and with 32 connections.
    stage alias
    for c in 1 32; do
      echo "--- CUDA_DEVICE_MAX_CONNECTIONS=$c memop EAGER coll mixed / p2p alltoall"
      for prog in "coll mixed" "p2p alltoall"; do
        set -- $prog
        CUDA_DEVICE_MAX_CONNECTIONS=$c CUDA_MODULE_LOADING=EAGER FERRY_USER_WAIT=memop FERRY_P2P_STREAM_WAIT=0 \
          NCCL_DEBUG=WARN timeout 25 $run --timeout 20 $b/tests/mp_$1 $2 2>&1 | grep -E "PASS|FAIL|timeout|hang" | head -2
      done
    done
    for v in "CUDA_MODULE_LOADING=EAGER" "CUDA_DEVICE_MAX_CONNECTIONS=32" "CUDA_DEVICE_MAX_CONNECTIONS=1"; do
      echo "--- $v RuntimeCudaZc.Preloaded"
      (cd $b && env $v ctest -R "RuntimeCudaZc.Preloaded" --timeout 25 2>&1 | grep -E "tests passed|Failed")
    done
    ;;
  pieces)
    # Staging piece size under lazy loading (1G = one piece, no pipelining).
    stage pieces
    for p in ${PIECES:-1G 4M 16M}; do
      echo "--- LAZY FERRY_P2P_STAGE_PIECE_BYTES=$p"
      CUDA_MODULE_LOADING=LAZY FERRY_P2P_STAGE_PIECE_BYTES=$p ferryOnly ${PIECES_OPS:-sendrecv} \
        -b ${PIECES_B:-1M} -e ${PIECES_E:-256M} -f ${PIECES_F:-4} -w ${PIECES_W:-3} -n ${PIECES_N:-10}
    done
    ;;
  nostage)
    # Does a one-thread spin-kernel wait stall lazy kernel loads (NOTES trap 2),
    # now that every Ferry kernel is really loaded (cuFuncLoad)? The issue's
    # scenario and the unbatched orders, lazy loading, sends NOT staged.
    stage nostage
    for v in "1 lazy" "0 lazy" "1 lazy" "1 unbatched" "1 mixes"; do
      set -- $v
      echo "--- LAZY kernel waits, not staged, FERRY_P2P_ZERO_COPY=$1 $2"
      if [ $2 = lazy ]; then prog=$b/tests/gpu_p2p_lazy; else prog="$b/tests/mp_p2p $2"; fi
      CUDA_MODULE_LOADING=LAZY FERRY_USER_WAIT=kernel FERRY_P2P_STAGE_SENDS=0 FERRY_P2P_ZERO_COPY=$1 \
        NCCL_DEBUG=WARN timeout 40 $run --timeout 35 $prog 2>&1 | grep -E "PASS|FAIL|hang|timeout" | head -2
    done
    ;;
  kmax)
    # Kernel p2p against NCCL at small and mid sizes (the default threshold),
    # then Ferry alone with kernel p2p up to 4M and with SM-free from 8 B, to
    # place FERRY_P2P_KERNEL_MAX_BYTES where the two curves cross.
    stage kmax
    timeout 90 $run --timeout 85 $b/bench/ferry-bench sendrecv,alltoall -b 8 -e 4M -f 2 -w 5 -n 30 \
      --inplace no --lib $b/libnccl.so.2 --compare "$nccl" >"$out/kmax.txt" 2>&1
    echo "kmax exit $?"; grep -v "^\[1\]" "$out/kmax.txt" | grep -v INFO | grep -E "^\[0\] +[0-9]|#wrong" | tail -46
    echo "--- kernel p2p up to 4M (FERRY_P2P_KERNEL_MAX_BYTES=4M)"
    FERRY_P2P_KERNEL_MAX_BYTES=4M ferryOnly sendrecv,alltoall -b 32K -e 4M -f 2 -w 5 -n 30
    echo "--- SM-free everywhere (FERRY_P2P_KERNEL_MAX_BYTES=0)"
    FERRY_P2P_KERNEL_MAX_BYTES=0 ferryOnly sendrecv -b 8 -e 4M -f 4 -w 5 -n 30
    ;;
  lanes)
    # Kernel p2p lanes: Ferry alone with kernel p2p up to 8M, per lane unit
    # (FERRY_P2P_KERNEL_LANE_BYTES), and with one lane (the old kernel p2p).
    stage lanes
    for lb in 8K 16K 32K 64K; do
      echo "--- sendrecv, kernel p2p to 8M, FERRY_P2P_KERNEL_LANE_BYTES=$lb"
      FERRY_P2P_KERNEL_LANE_BYTES=$lb FERRY_P2P_KERNEL_MAX_BYTES=8M ferryOnly sendrecv -b 16K -e 8M -f 2 -w 5 -n 30
    done
    echo "--- alltoall, kernel p2p to 8M (default lanes)"
    FERRY_P2P_KERNEL_MAX_BYTES=8M ferryOnly alltoall -b 16K -e 8M -f 2 -w 5 -n 30
    echo "--- sendrecv, one lane"
    FERRY_P2P_KERNEL_LANES=1 FERRY_P2P_KERNEL_MAX_BYTES=8M ferryOnly sendrecv -b 16K -e 8M -f 4 -w 5 -n 30
    ;;
  laneslots)
    # Lane slot count (fewer = bigger slots from the same FIFO share), kernel
    # p2p everywhere up to 8M, then the compare run with kernel p2p to 1M.
    stage laneslots
    for ls in 2 4 8; do
      echo "--- sendrecv, kernel p2p to 8M, FERRY_P2P_KERNEL_LANE_SLOTS=$ls"
      FERRY_P2P_KERNEL_LANE_SLOTS=$ls FERRY_P2P_KERNEL_MAX_BYTES=8M ferryOnly sendrecv -b 64K -e 8M -f 2 -w 5 -n 30
    done
    echo "--- alltoall, kernel p2p to 8M, FERRY_P2P_KERNEL_LANE_SLOTS=2"
    FERRY_P2P_KERNEL_LANE_SLOTS=2 FERRY_P2P_KERNEL_MAX_BYTES=8M ferryOnly alltoall -b 64K -e 8M -f 2 -w 5 -n 30
    ;;
  lcost)
    # Host submission vs GPU time per op (bench/launch_cost.cc), Ferry then NCCL
    # (LCOST_OPS, LCOST_BYTES: lists).
    stage lcost
    for op in ${LCOST_OPS:-sendrecv allreduce}; do
      for bytes in ${LCOST_BYTES:-8 65536 1048576}; do
        for lib in $b/libnccl.so.2 "$nccl"; do
          launchCost "$lib" $op $bytes
        done
      done
    done
    ;;
  lcostprof)
    # Ferry's host submission per 16 MiB exchange with its CPU profile per
    # launch phase, SM-free and kernel p2p, lazy and eager, then NCCL's.
    # (LCOST_USER_WAITS: FERRY_USER_WAIT values of the SM-free runs, default auto.)
    stage lcostprof
    for load in LAZY EAGER; do
      for wait in ${LCOST_USER_WAITS:-auto} kernelp2p; do
        pass=1
        [ $wait = kernelp2p ] && pass=0 wait=auto
        echo "-- CUDA_MODULE_LOADING=$load NCCL_PASS_SM=$pass FERRY_USER_WAIT=$wait"
        CUDA_MODULE_LOADING=$load NCCL_PASS_SM=$pass FERRY_USER_WAIT=$wait FERRY_PROFILE=1 \
          NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT launchCost $b/libnccl.so.2 sendrecv ${LCOST_BYTES:-16777216}
      done
    done 2>&1 | tee "$out/lcostprof.txt"
    launchCost "$nccl" sendrecv ${LCOST_BYTES:-16777216} | tee -a "$out/lcostprof.txt"
    ;;
  gpup2p)
    # The p2p GPU tests without the two large-message ones, plus graph capture.
    stage gpup2p
    (cd $b && timeout 200 ctest -L gpu -R "p2p|graph" -E "large" --timeout 100 --output-on-failure 2>&1 >"$out/ctest-gpup2p.log"
     grep -E "tests passed|Failed|FAIL" "$out/ctest-gpup2p.log" | tail -12)
    ;;
  llmax)
    # Kernel p2p LL threshold against NCCL (default), then Ferry alone with LL
    # off and with LL up to 64K.
    stage llmax
    timeout 60 $run --timeout 55 $b/bench/ferry-bench sendrecv,alltoall -b 8 -e 256K -f 4 -w 20 -n 30 \
      --inplace no --lib $b/libnccl.so.2 --compare "$nccl" >"$out/llmax.txt" 2>&1
    echo "llmax exit $?"; grep -v "^\[1\]" "$out/llmax.txt" | grep -v INFO | grep -E "^\[0\] +[0-9].*N/A +N/A +N/A +N/A +N/A +N/A$|#wrong total"
    for v in 0 64K; do
      echo "--- FERRY_P2P_LL_MAX_BYTES=$v"
      FERRY_P2P_LL_MAX_BYTES=$v ferryOnly sendrecv,alltoall -b 8 -e 256K -f 4 -w 20 -n 30
    done
    ;;
  lllanes)
    # Kernel p2p LL cut into lanes: "LL limit:LL lane unit" configurations
    # against NCCL in the same run (LLLANES_CFGS overrides the list).
    stage lllanes
    for v in ${LLLANES_CFGS:-16K:8K 64K:8K 64K:4K}; do
      set -- ${v%%:*} ${v#*:}
      echo "--- FERRY_P2P_LL_MAX_BYTES=$1 FERRY_P2P_LL_LANE_BYTES=$2"
      FERRY_P2P_LL_MAX_BYTES=$1 FERRY_P2P_LL_LANE_BYTES=$2 timeout 60 $run --timeout 55 \
        $b/bench/ferry-bench sendrecv,alltoall -b ${LLLANES_B:-1K} -e ${LLLANES_E:-128K} -f 2 -w 20 -n 30 --inplace no \
        --lib $b/libnccl.so.2 --compare "$nccl" >"$out/lllanes-$1-$2.txt" 2>&1
      echo "exit $?"; grep -E "^\[0\] +[0-9]|wrong" "$out/lllanes-$1-$2.txt" | cut -c1-160
    done
    ;;
  nsys)
    # Where a staged 16 MiB sendrecv spends its time: nsys GPU trace of rank
    # 0's memcpys (start, duration, stream, size) over a few iterations.
    stage nsys
    ns=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    echo "nsys: ${ns:-none}"; [ -z "$ns" ] && continue
    CUDA_MODULE_LOADING=LAZY timeout 120 $run --timeout 110 $ns profile -t cuda -o "$out/nsys-%q{FERRY_RANK}-%p" \
      --force-overwrite true $b/bench/ferry-bench sendrecv -b ${NSYS_SIZE:-16M} -e ${NSYS_SIZE:-16M} -w 3 -n 5 \
      --inplace no --lib $b/libnccl.so.2 >"$out/nsys-run.log" 2>&1
    echo "nsys run exit $?"; tail -3 "$out/nsys-run.log"
    for f in "$out"/nsys-*.nsys-rep; do
      $ns stats -q -r cuda_gpu_trace -f csv -o "${f%.nsys-rep}" "$f" >/dev/null 2>&1
    done
    ls "$out" | head
    for f in "$out"/nsys-*cuda_gpu_trace.csv; do
      echo "--- $f"; grep -iE "memcpy|memset|Kernel|wait" "$f" | tail -40 | cut -c1-200
    done
    ;;
  copyov)
    # Local vs peer copies side by side (bench/copy_overlap.cu).
    stage copyov
    for sz in ${COPYOV_SIZES:-16777216 134217728}; do
      timeout 60 $b/bench/ferry-copy-overlap $sz ${COPYOV_ITERS:-20}
    done
    ;;
  cesplit)
    # Push vs pull vs push+pull peer copies (bench/ce_split.cu).
    stage cesplit
    for sz in ${CESPLIT_SIZES:-16777216 268435456 1073741824}; do
      timeout 60 $b/bench/ferry-ce-split $sz ${CESPLIT_ITERS:-20}
    done
    ;;
  callcost)
    # The CPU time of each CUDA call an SM-free launch makes (bench/call_cost.cu).
    stage callcost
    for sz in ${CALLCOST_SIZES:-16777216}; do
      timeout 120 $b/bench/ferry-call-cost $sz ${CALLCOST_ROUNDS:-200}
    done 2>&1 | tee "$out/callcost.txt"
    ;;
  zerosmcond)
    # Which condition makes a parked stream wait-value stall other streams'
    # kernels (bench/zerosm_cond.cu), per loading mode and connection count.
    stage zerosmcond
    for load in EAGER LAZY; do
      for conns in default 1 32; do
        if [ $conns = default ]; then
          CUDA_MODULE_LOADING=$load timeout 90 $b/bench/ferry-zerosm-cond
        else
          CUDA_MODULE_LOADING=$load CUDA_DEVICE_MAX_CONNECTIONS=$conns timeout 90 $b/bench/ferry-zerosm-cond
        fi
      done
    done 2>&1 | tee "$out/zerosmcond.txt"
    ;;
  spincost)
    # What a one-thread wait kernel costs a GEMM, by carveout (bench/spin_cost.cu).
    stage spincost
    timeout 120 $b/bench/ferry-spin-cost ${SPINCOST_WINDOW_MS:-300} 2>&1 | tee "$out/spincost.txt"
    ;;
  zerosmalias)
    stage zerosmalias
    # ALIAS_PRE: streams made before the wait parks; ALIAS_SPIN: a spin
    # kernel holds the stream instead of a wait-value.
    for v in "ALIAS_X=1" "ALIAS_SPIN=1 CUDA_MODULE_LOADING=EAGER"; do
      echo "--- $v"
      env $v timeout 70 $b/bench/ferry-zerosm-cond alias 40
    done 2>&1 | tee "$out/zerosmalias.txt"
    ;;
  firstuse)
    # How long kernel p2p's first iterations stay slow: one size, few warm-ups.
    stage firstuse
    for w in 0 1 3 20; do
      echo "--- -w $w"; ferryOnly sendrecv -b ${FIRSTUSE_SIZE:-64K} -e ${FIRSTUSE_SIZE:-64K} -w $w -n 10
    done
    ;;
  p2psan)
    # compute-sanitizer over kernel p2p: LL lane parts, FIFO lanes, both tables.
    stage p2psan
    FERRY_P2P_LL_LANE_BYTES=1K timeout 200 compute-sanitizer --tool memcheck \
      --target-processes all --print-limit 10 $run --timeout 190 $b/tests/mp_p2p many >"$out/p2psan-ll.log" 2>&1
    echo "memcheck LL exit $?"; grep -E "ERROR SUMMARY|PASS|FAIL" "$out/p2psan-ll.log" | head -6
    FERRY_P2P_LL_MAX_BYTES=0 FERRY_P2P_KERNEL_LANE_BYTES=1K timeout 200 compute-sanitizer --tool memcheck --target-processes all \
      --print-limit 10 $run --timeout 190 $b/tests/mp_p2p many >"$out/p2psan-many.log" 2>&1
    echo "memcheck many exit $?"; grep -E "ERROR SUMMARY|PASS|FAIL" "$out/p2psan-many.log" | head -6
    FERRY_P2P_LL_LANE_BYTES=1K timeout 200 compute-sanitizer --tool racecheck --target-processes all \
      --print-limit 10 $run --timeout 190 $b/tests/mp_p2p many >"$out/p2prace.log" 2>&1
    echo "racecheck many exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASS|FAIL" "$out/p2prace.log" | head -6
    ;;
  collsan)
    stage collsan
    timeout 200 compute-sanitizer --tool memcheck --target-processes all --print-limit 10 \
      $run --timeout 190 $b/tests/mp_coll streams >"$out/collsan.log" 2>&1
    echo "memcheck exit $?"; grep -E "ERROR SUMMARY|PASS|FAIL" "$out/collsan.log" | head -6
    timeout 200 compute-sanitizer --tool racecheck --target-processes all --print-limit 10 \
      $run --timeout 190 $b/tests/mp_coll streams >"$out/collrace.log" 2>&1
    echo "racecheck exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASS|FAIL" "$out/collrace.log" | head -6
    # Every size through LL (the streams case mixes both protocols by size).
    FERRY_COLL_LL_MAX_BYTES=1G timeout 200 compute-sanitizer --tool memcheck --target-processes all \
      --print-limit 10 $run --timeout 190 $b/tests/mp_coll matrix_quick >"$out/collsan-ll.log" 2>&1
    echo "memcheck LL exit $?"; grep -E "ERROR SUMMARY|PASS|FAIL" "$out/collsan-ll.log" | head -6
    ;;
  diag2)
    stage diag2
    for v in ${DIAG2_CASES:-"coll stress" "coll:FERRY_P2P_ZERO_COPY=0 stress" "p2p alltoall" "coll mixed" "coll:NCCL_PASS_SM=0 mixed" "coll streams" "coll abort"}; do
      set -- $v
      prog=${1%%:*}; envs=""; [ "$prog" != "$1" ] && envs=${1#*:}
      echo "--- $prog $2 $envs"
      env $envs NCCL_DEBUG=WARN timeout 45 $run --timeout 40 $b/tests/mp_$prog $2 >"$out/diag2-$prog-$2-${envs//=/}.log" 2>&1
      echo "exit $?"; grep -E "PASS|FAIL|WARN|timeout|verified" "$out/diag2-$prog-$2-${envs//=/}.log" | sort | uniq -c | sort -rn | head -6 | cut -c1-240
    done
    timeout 60 $run --timeout 50 $b/tests/gpu_coll_graph 2>&1 | grep -E "PASS|FAIL|kernel p2p|timeout" | head -6
    ;;
  p2pquick)
    stage p2pquick
    timeout 150 $run --timeout 140 $b/bench/ferry-bench sendrecv,alltoall \
      -b 8 -e 1G -f 8 -w 3 -n 10 --inplace no --lib $b/libnccl.so.2 --compare "$nccl" \
      >"$out/p2pquick.txt" 2>&1
    echo "p2pquick exit $?"; grep -v "^\[1\]" "$out/p2pquick.txt" | grep -v INFO | grep -E "^\[0\] +[0-9]|#wrong" | tail -24
    ;;
  sweep)
    stage sweep
    for v in "16 256K" "32 256K" "16 512K" "32 512K" "24 512K"; do
      set -- $v
      echo "--- channels $1 slot $2"
      FERRY_COLL_CHANNELS=$1 FERRY_COLL_SLOT_BYTES=$2 ferryOnly all_reduce,all_gather -b 32M -e 512M -f 4 -w 2 -n 5
    done
    ;;
  llsweep)
    # LL threshold and channel density for small/mid all-reduce (Ferry only),
    # then the chosen defaults against NCCL.
    stage llsweep
    for v in "0 16K" "8M 4K" "8M 16K" "8M 64K"; do
      set -- $v
      echo "--- LL max $1, LL channel bytes $2"
      FERRY_COLL_LL_MAX_BYTES=$1 FERRY_COLL_LL_CHANNEL_BYTES=$2 ferryOnly all_reduce -b 8 -e 8M -f 4 -w 5 -n 20
    done
    ;;
  arsweep)
    # Channels for large all-reduce (Ferry only).
    stage arsweep
    for c in 32 48 64; do
      echo "--- channels $c"
      FERRY_COLL_CHANNELS=$c ferryOnly all_reduce -b 32M -e 1G -f 8 -w 2 -n 5
    done
    ;;
  p2pmode)
    # SM-free sendrecv at mid sizes: lazy vs eager loading, staged sends on/off.
    stage p2pmode
    for v in "LAZY 1" "EAGER 1" "EAGER 0"; do
      set -- $v
      echo "--- CUDA_MODULE_LOADING=$1 FERRY_P2P_STAGE_SENDS=$2"
      CUDA_MODULE_LOADING=$1 FERRY_P2P_STAGE_SENDS=$2 ferryOnly sendrecv -b 256K -e 64M -f 4 -w 3 -n 10
    done
    ;;
  shmcoll)
    # Where a collective across hosts spends its time (issue 18): the same
    # Simple ring (1 MiB slots, 4 channels) on ONE host, its FIFOs in host
    # memory (NCCL_P2P_DISABLE=1: every kernel write and read crosses PCIe,
    # as the legs around a network hop do), then more blocks, then over
    # NVLink; Ferry alone, "size us busbw" per op. Against collnet's times
    # across hosts, what is left is the network's share.
    stage shmcoll
    for v in "4 1" "8 1" "16 1" "4 0"; do
      set -- $v
      echo "--- channels $1, NCCL_P2P_DISABLE=$2"
      FERRY_COLL_CHANNELS=$1 NCCL_P2P_DISABLE=$2 FERRY_COLL_SLOT_BYTES=1M FERRY_COLL_LL_MAX_BYTES=0 \
        ferryOnly all_reduce,all_gather,reduce_scatter -b 1M -e 64M -f 4 -w 5 -n 20
    done 2>&1 | tee "$out/shmcoll.txt"
    ;;
  chsweep)
    # Channels x slot size for large collectives (Ferry only).
    stage chsweep
    for v in "32 512K" "64 256K" "64 512K" "48 256K"; do
      set -- $v
      echo "--- channels $1 slot $2"
      FERRY_COLL_CHANNELS=$1 FERRY_COLL_SLOT_BYTES=$2 ferryOnly all_reduce,all_gather,reduce_scatter -b 32M -e 1G -f 8 -w 2 -n 5
    done
    ;;
  bcast)
    stage bcast
    timeout 120 $run --timeout 110 $b/bench/ferry-bench broadcast,reduce -b 8 -e 1G -f 8 -w 5 -n 20 --inplace no \
      --lib $b/libnccl.so.2 --compare "$nccl" >"$out/bcast.txt" 2>&1
    echo "bcast exit $?"; grep -v "^\[1\]" "$out/bcast.txt" | grep -E "^\[0\] +[0-9].*N/A.*N/A.*N/A.*N/A.*N/A.*N/A$|#wrong total" | tail -24
    ;;
  wincoll)
    # Window collectives (issue 19): all-gather and broadcast on plain
    # buffers and on NCCL_WIN_COLL_SYMMETRIC windows, Ferry beside NCCL in
    # the same run (NCCL's symmetric kernels take the windowed run).
    stage wincoll
    for w in "" --window; do
      echo "--- window '${w}'"
      timeout 150 $run --timeout 140 $b/bench/ferry-bench all_gather,broadcast -b 1M -e 1G -f 4 -w 5 -n 20 \
        --inplace no $w --lib $b/libnccl.so.2 --compare "$nccl" >"$out/wincoll${w}.txt" 2>&1
      echo "wincoll '${w}' exit $?"
      grep -v "^\[1\]" "$out/wincoll${w}.txt" | grep -v INFO | tail -16
    done
    ;;
  bcastdiag)
    # Broadcast alone, three times, then reduce (same pipeline shape) once.
    stage bcastdiag
    for op in broadcast broadcast broadcast reduce; do
      echo "--- $op"
      ferryOnly $op -b 256K -e 16M -f 8 -w 5 -n 20
    done
    ;;
  arfine)
    stage arfine
    timeout 120 $run --timeout 110 $b/bench/ferry-bench all_reduce -b 8 -e 16M -f 2 -w 5 -n 20 --inplace no \
      --lib $b/libnccl.so.2 --compare "$nccl" --json "$out/arfine.json" >"$out/arfine.txt" 2>&1
    echo "arfine exit $?"; grep -v "^\[1\]" "$out/arfine.txt" | grep -v INFO | tail -30
    ;;
  torch)
    stage torch
    LD_PRELOAD=$b/libnccl.so.2 timeout 120 python3 -m torch.distributed.run --nproc-per-node 2 \
      "$src/scripts/torch_p2p_smoke.py" 2>&1 | grep -E "PASS|FAIL|Error|error" | head -10
    ;;
  gpulazy)
    stage gpulazy
    (cd $b && timeout 200 ctest -L gpu -E "RuntimeCudaZc|runtime.cuda.zc|EAGER|memop" --timeout 90 2>&1 >"$out/ctest-gpulazy.log"
     grep -E "Test +#|tests passed|FAIL" "$out/ctest-gpulazy.log" | grep -v " Passed" | tail -20; grep -c " Passed" "$out/ctest-gpulazy.log")
    grep -h "completed in\|large message" "$out/ctest-gpulazy.log" | head -12
    ;;
  sanitize)
    stage sanitize
    timeout 120 compute-sanitizer --tool memcheck --target-processes all --print-limit 20 \
      $run --timeout 100 $b/tests/mp_p2p dtypes >"$out/sanitizer.log" 2>&1
    echo "sanitizer exit $?"; grep -E "ERROR SUMMARY|PASS|FAIL" "$out/sanitizer.log" | head -8
    ;;
  bench)
    stage bench
    for mode in ${BENCH_MODES:-LAZY EAGER}; do
      CUDA_MODULE_LOADING=$mode timeout 200 $run --timeout 190 $b/bench/ferry-bench sendrecv,alltoall \
        -b ${BENCH_B:-8} -e ${BENCH_E:-4G} -f ${BENCH_F:-8} -w ${BENCH_W:-5} -n ${BENCH_N:-20} --inplace no --lib $b/libnccl.so.2 --compare "$nccl" \
        --json "$out/bench-$mode.json" >"$out/bench-$mode.txt" 2>&1
      echo "bench $mode exit $?"; grep -v "^\[1\]" "$out/bench-$mode.txt" | tail -40
    done
    ;;
  p2psweep)
    # Two ranks on one host (one GPU each), Ferry beside NVIDIA's NCCL with
    # --rounds, under each setting of P2PSWEEP (as NETSWEEP; "default" is
    # none) and module-loading mode of P2PSWEEP_MODES: one line per setting,
    # "op size A-us/B-us A/B-busbw | ..." (a later CUDA_MODULE_LOADING in a
    # setting overrides the mode).
    # P2P_LIMIT_S: seconds per setting (140; a 4 KiB-1 GiB sweep of two ops
    # with 3 rounds needs ~150).
    stage p2psweep
    p2pLimit=${P2P_LIMIT_S:-140}
    IFS=';' read -ra settings <<<"${P2PSWEEP:-default}"
    i=0
    for mode in ${P2PSWEEP_MODES:-LAZY}; do
      for setting in "${settings[@]}"; do
        envs=""; [ "$setting" = default ] || envs=$setting
        i=$((i + 1))
        env CUDA_MODULE_LOADING=$mode $envs timeout $((p2pLimit + 10)) $run --timeout $p2pLimit $b/bench/ferry-bench \
          ${P2PSWEEP_OPS:-sendrecv} -b ${P2P_MIN:-1M} -e ${P2P_MAX:-16M} -f ${P2P_F:-2} \
          -w ${P2P_WARMUP:-20} -n ${P2P_ITERS:-50} --inplace no --lib $b/libnccl.so.2 --compare "$nccl" \
          --rounds ${P2P_ROUNDS:-3} >"$out/p2psweep-$i.txt" 2>&1
        echo "--- $mode $setting: exit $?"
        awk '/^\[0\] # [a-z_]+$/ {op=$3} /^\[0\] +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ && op != "" \
          {printf "%s %s %s/%s %s | ", op, $2, $4, $5, $8} END {print ""}' "$out/p2psweep-$i.txt"
      done
    done 2>&1 | tee "$out/p2psweep-summary.txt"
    ;;
  memory)
    # What communicators hold (issue 19): many split communicators, the
    # collective rings on first use. One rank per GPU where there are two;
    # with one GPU, a 1-rank communicator and two emulated hosts.
    stage memory
    export NCCL_SOCKET_IFNAME=lo
    ngpu=$(nvidia-smi -L | grep -c '^GPU')
    if [ "$ngpu" -ge 2 ]; then
      sets="2:1:many_64 2:1:window"
    else
      sets="1:1:many_64 2:2:many_16"
    fi
    for v in $sets; do
      IFS=: read -r n hosts args <<<"$v"
      # Window sends go straight from window to window only where sends are
      # not staged (as gpu.api.window.n2 runs it): under lazy loading a send
      # that arrives before its receive stages by design (NOTES trap 2).
      stage_env=""
      [ "$args" = window ] && stage_env="FERRY_P2P_STAGE_SENDS=0"
      for rc in 1 0; do
        env $stage_env NCCL_RUNTIME_CONNECT=$rc timeout 200 $b/tools/ferry-run/ferry-run -n $n --hosts $hosts \
          --runtime cuda --timeout 190 $b/tests/mp_memory ${args//_/ } >"$out/memory-$n-$hosts-$rc.log" 2>&1
        echo "mp_memory ${args//_/ } n=$n hosts=$hosts NCCL_RUNTIME_CONNECT=$rc: exit $? $(grep -hE 'many:|PASS|FAIL' "$out/memory-$n-$hosts-$rc.log" | head -4 | tr '\n' ' ')"
      done
    done
    ;;
  inittime)
    # ncclCommInitRank + destroy of 2 ranks (one per GPU), Ferry and NVIDIA's
    # NCCL by the same program (bench/init_time.cc), three runs each.
    stage inittime
    for lib in "$b/libnccl.so.2" "$nccl"; do
      for i in 1 2 3; do
        timeout 60 $run --timeout 50 $b/bench/ferry-init-time --lib "$lib" 2>&1 | grep "init" | head -1
      done
    done
    ;;
  overlap)
    # A GEMM's slowdown beside OVERLAP_BYTES (a list; 256M) of OVERLAP_OPS
    # (alltoall,sendrecv), Ferry beside NCCL: OVERLAP_ITERS messages (40),
    # OVERLAP_ROUNDS rounds (1; use 5), OVERLAP_MODES module loading (LAZY);
    # ferry_bench/overlap.h. OVERLAP_SETTINGS: ';'-separated env settings,
    # one run each ("default": none; "control": --overlap-nothing, the
    # measurement's own bias).
    stage overlap
    IFS=';' read -ra osettings <<<"${OVERLAP_SETTINGS:-default}"
    i=0
    for mode in ${OVERLAP_MODES:-LAZY}; do
      for obytes in ${OVERLAP_BYTES:-256M}; do
      for setting in "${osettings[@]}"; do
        envs=""; [ "$setting" = default ] || [ "$setting" = control ] || envs=$setting
        how=--overlap; [ "$setting" = control ] && how=--overlap-nothing
        i=$((i + 1))
        env CUDA_MODULE_LOADING=$mode $envs timeout 150 $run --timeout 140 $b/bench/ferry-bench ${OVERLAP_OPS:-alltoall,sendrecv} \
          -b $obytes -e $obytes --inplace no -w 2 -n ${OVERLAP_ITERS:-40} --rounds ${OVERLAP_ROUNDS:-1} \
          --lib $b/libnccl.so.2 --compare "$nccl" $how \
          >"$out/overlap-$mode-$i.txt" 2>&1
        echo "overlap $mode $obytes $setting exit $?"; grep -v "^\[1\]" "$out/overlap-$mode-$i.txt" | tail -16
      done
      done
    done
    ;;
  *) # the network stages (netone, collnet, netsweep, ...): device_net.sh
    DEVICE_NET_FROM_P2P=1 "$here/device_net.sh" "$src" "$s"
    ;;
  esac
done
rc=$?  # the last stage's status (an unknown stage: device_net.sh's 3)
"$here/fold_logs.sh" "$out"
exit $rc
