#!/usr/bin/env bash
# The real-client suite on a 2-GPU device machine: PyTorch's parallelism APIs
# (scripts/real_clients/clients.py) and nccl-tests with -g 2, each under
# NVIDIA's NCCL (torch's wheel) and under Ferry, in the same call. Results:
# $OUT/clients.md (one table, every case x mode) and the raw logs.
#
# Usage: scripts/real_clients.sh FERRY_BUILD_DIR [stages...]
#   stages: torch      clients.py in every mode of $CLIENT_MODES
#           nccltests  every *_perf binary of $NCCL_TESTS_DIR, both libraries
#           ntbuild    only build nccl-tests (to overlap the build with other work)
#           ntmpi      nccl-tests built with MPI=1, one GPU per process under
#                      mpiexec (NT_NP ranks, default 2; the MPICH of .mpikit,
#                      made by scripts/mpi_kit.sh and carried), both libraries
#           p2pdiag    a2a, batch, blocking under Ferry: pushes/pulls, mappings, staging,
#                      the CPU profile of each launch phase (FERRY_PROFILE=1)
#           hangdiag   one pipelining schedule under Ferry with P2P tracing;
#                      after $DIAG_WAIT s, native stacks of both ranks (cuda-gdb)
#           paired     two modes at once on GPUs 0-1 and 2-3 of a 4-GPU machine
#           death      rank 1 dies mid-loop: how long rank 0 takes to fail
#           summary    the tables (always last)
# Modes: nccl-lazy nccl-eager (NVIDIA's NCCL), ferry-lazy ferry-eager (Ferry,
# SM-free default), kernel-lazy kernel-eager (Ferry, NCCL_PASS_SM=0),
# memop-lazy memop-eager (Ferry SM-free, FERRY_USER_WAIT=memop: the default
# since session 33), spin-lazy spin-eager (FERRY_USER_WAIT=kernel); lazy is
# torch's default module loading, eager is CUDA_MODULE_LOADING=EAGER. A mode
# may carry a suffix to repeat it as its own column (ferry-lazy-r2); "-roots"
# in a mode's name sets TORCH_NCCL_RANKS_PER_ROOT=1, so torch initializes
# every communicator with one unique id per rank (ncclCommInitRankScalable).
# Diagnostic suffixes (Ferry modes): "-pw0" turns the push wait off
# (FERRY_P2P_PUSH_WAIT_US=0), "-nb" keeps the push wait size-bound on busy
# streams too (FERRY_P2P_PUSH_WAIT_BUSY=0), "-b2" ends a busy wait once the
# stream goes idle (FERRY_P2P_PUSH_WAIT_BUSY=2), "-usc" / "-nousc" copy (or not) as the second
# side on the user stream (FERRY_P2P_USER_STREAM_COPY=1), "-prof" prints each communicator's CPU profile
# at its destroy (FERRY_PROFILE=1), "-envN" adds the VAR=value words of
# $CLIENT_ENVN (e.g. CLIENT_ENV1="FERRY_P2P_PUSH_WAIT_STAGED=0" and mode
# ferry-lazy-env1; an experiment without editing this script).
# CLIENT_NPROC: ranks (one GPU each) of the torch stage, default 2.
# CLIENT_SCHEDULES: the pipe case's schedules (one listed twice runs again in
# the same process: pipe.NAME~2); CLIENT_PROFILE_STEP=1: one more step of each
# under torch.profiler, its top CPU ops and GPU work printed in the log
# ("PROFILE"), the Chrome trace kept where CLIENT_TRACE_DIR says (one per
# group with CLIENT_AB_ENV; real_clients/trace_gaps.py compares them);
# CLIENT_AB_ENV="VAR=value ...[; VAR=value ...]": each schedule also runs
# on one more group per ';'-separated variant, made with those words in the
# environment (pipe.NAME+B, +C, ...), steps interleaved with the default
# group's in one process (order rotating); b_over_a is the median ratio of
# a variant's step to the default group's step of the same round (a Ferry
# knob's effect without the spread between processes, trap 66; NCCL's run
# is the control). The a2a case does the same per iteration (a2a+B, ...).
# CLIENT_TIME_STEPS: timed steps per case (default 15).
# CLIENT_PIN_MAIN=1: the main thread alone on one CPU of the rank's slice
# (session 30: it did not narrow the spread).
# paired: $PAIRED ("modeA:modeB ...") side by side on a 4-GPU machine, GPUs
# 0-1 and 2-3, swapped every run, $PAIR_RUNS runs each (see the stage).
# CLIENT_OVERLAP_ROUNDS (5) and CLIENT_OVERLAP_ITERS (40): the overlap case's
# rounds (it reports their median) and 256 MiB messages per window; more of
# either narrows the spread between runs (trap 72).
# CLIENT_EMULATE_HOSTS=1: every rank its own emulated host (NCCL_HOSTID),
# GPUs shared, loopback sockets: runs on one GPU (API paths, not speed).
# CLIENT_A2A_TRACE=1: the a2a case prints each call's CPU and GPU time
# ("A2A rank R ... iteration I"), between the library's log lines.
# CLIENT_A2A_ROWS: the a2a case's largest block in rows of 1024 bf16
# (default 70000; 16 ranks on one H200 need ~20000).
# CLIENT_API_BIG=0: the torchapi case leaves out its counts above 2^31
# (~10 GiB of device memory per rank; for many ranks on one GPU).
set -uo pipefail
b=$(cd "$1" && pwd)
shift
stages=${*:-torch nccltests summary}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
[ "${CLIENT_EMULATE_HOSTS:-0}" = 1 ] && export NCCL_SOCKET_IFNAME=lo
nccl=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "nccl", "lib", "libnccl.so.2"))')
[ -f "$nccl" ] || { echo "NVIDIA's NCCL not found at $nccl"; exit 1; }
ferry=$b/libnccl.so.2
[ -f "$ferry" ] || { echo "no Ferry library at $ferry"; exit 1; }
modes=${CLIENT_MODES:-nccl-lazy ferry-lazy kernel-lazy nccl-eager ferry-eager kernel-eager}
cases=${CLIENT_CASES:-pipe,fsdp2,ddp,a2a,batch,blocking,overlap,graph,graphp2p,torchapi,mesh}
schedules=${CLIENT_SCHEDULES:-GPipe,1F1B,Interleaved1F1B,LoopedBFS,InterleavedZeroBubble,ZBVZeroBubble,DualPipeV}
ntsrc=${NCCL_TESTS_SRC:-$here/../.nccl-tests}  # a fetched snapshot, never committed
ntdir=/tmp/nccl-tests-build
ntargs=${NT_ARGS:--b 8 -e 1G -f 4 -g 2 -c 1 -n 10 -w 3}

# Environment of one mode, as "VAR=value ..." for env(1).
mode_env() {
  local e=""
  case $1 in
  ferry-*) e="LD_PRELOAD=$ferry" ;;
  kernel-*) e="LD_PRELOAD=$ferry NCCL_PASS_SM=0" ;;
  memop-*) e="LD_PRELOAD=$ferry FERRY_USER_WAIT=memop" ;;
  spin-*) e="LD_PRELOAD=$ferry FERRY_USER_WAIT=kernel" ;;
  esac
  case $1 in *-eager*) e="$e CUDA_MODULE_LOADING=EAGER" ;; esac
  case $1 in *-roots*) e="$e TORCH_NCCL_RANKS_PER_ROOT=1" ;; esac
  case $1 in *-pw0*) e="$e FERRY_P2P_PUSH_WAIT_US=0" ;; esac
  case $1 in *-nb*) e="$e FERRY_P2P_PUSH_WAIT_BUSY=0" ;; esac
  case $1 in *-b2*) e="$e FERRY_P2P_PUSH_WAIT_BUSY=2" ;; esac
  case $1 in *-usc*) e="$e FERRY_P2P_USER_STREAM_COPY=1" ;; esac
  case $1 in *-nousc*) e="$e FERRY_P2P_USER_STREAM_COPY=0" ;; esac
  case $1 in *-prof*) e="$e FERRY_PROFILE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT" ;; esac
  case $1 in *-env[0-9]*)  # -envN: the VAR=value words of $CLIENT_ENVN
    local n=${1##*-env}
    n=${n%%-*}
    local v=CLIENT_ENV$n
    e="$e ${!v:-}" ;;
  esac
  echo "$e"
}

torchrun_clients() {  # mode, extra clients.py args...
  local mode=$1 expect=ferry
  shift
  case $mode in nccl-*) expect=nccl ;; esac
  env $(mode_env "$mode") timeout ${CLIENT_TIMEOUT:-420} python3 -m torch.distributed.run \
    --nproc-per-node ${CLIENT_NPROC:-2} --master-port ${CLIENT_MASTER_PORT:-29500} \
    "$here/real_clients/clients.py" --tag "$mode" --expect $expect "$@"
}

# Builds nccl-tests once into $1 (make log $out/$2.log; further words: make
# variables), against NVIDIA's own headers (torch's wheel), as users build it
# (the wheel ships libnccl.so.2 only: the link needs libnccl.so).
nt_make() {
  local dir=$1 log=$out/$2.log h=/tmp/nccl-home
  shift 2
  [ -x "$dir/all_reduce_perf" ] && return 0
  mkdir -p $h/lib && ln -sfn "$(dirname "$(dirname "$nccl")")/include" $h/include &&
    ln -sf "$nccl" $h/lib/libnccl.so && ln -sf "$nccl" $h/lib/libnccl.so.2
  make -C "$ntsrc/src" -j 32 BUILDDIR="$dir" DSO=1 NCCL_HOME=$h "$@" \
    CUDA_HOME=/usr/local/cuda NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
    >"$log" 2>&1 || { tail -20 "$log"; return 1; }
}
nt_build() { nt_make "$ntdir" nt-build; }

# nccl-tests with MPI=1 against the carried MPICH kit: the multi-process way
# clusters run it (one GPU per rank; the -g 2 build drives both from one).
kit=${MPI_KIT:-$here/../.mpikit}
ntmdir=/tmp/nccl-tests-mpi
nt_build_mpi() {
  [ -x "$kit/bin/mpiexec" ] || { echo "no MPI kit at $kit: run scripts/mpi_kit.sh, carry .mpikit"; return 1; }
  nt_make "$ntmdir" ntmpi-build MPI=1 MPI_HOME="$kit"
}

# Every *_perf of $1 under both libraries: `$4 BINARY LIBDIR LOG` runs one
# (LIBDIR holds the libnccl.so.2 it preloads), logs $out/$3-OP-LIB.log, and
# its RESULT line (tag $2-LIB) joins nt-results.log.
nt_each() {
  local bins=$1 tag=$2 logname=$3 runner=$4 bin op lib dir log
  for bin in "$bins"/*_perf; do
    op=$(basename "$bin" _perf)
    for lib in nccl ferry; do
      dir=$(dirname "$nccl")
      [ $lib = ferry ] && dir=$b
      log="$out/$logname-$op-$lib.log"
      $runner "$bin" "$dir" "$log"
      python3 "$here/real_clients/parse_nccl_tests.py" "$tag-$lib" "$op" "$log" $? >>"$out/nt-results.log"
    done
    tail -2 "$out/nt-results.log" | cut -c1-160
  done
}
nt_one() {  # one process, both GPUs (-g 2)
  LD_LIBRARY_PATH=$2:$ntdir/verifiable LD_PRELOAD=$2/libnccl.so.2 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
    timeout ${NT_TIMEOUT:-120} "$1" $ntargs >"$3" 2>&1
}
nt_one_mpi() {  # NT_NP processes, one GPU each; -genv: the ranks get the library, mpiexec does not
  LD_LIBRARY_PATH=$kit/lib UCX_MODULE_DIR=$kit/lib/ucx timeout ${NT_TIMEOUT:-120} \
    "$kit/bin/mpiexec" -n ${NT_NP:-2} -genv LD_LIBRARY_PATH "$2:$ntmdir/verifiable:$kit/lib" \
    -genv LD_PRELOAD "$2/libnccl.so.2" -genv NCCL_DEBUG INFO -genv NCCL_DEBUG_SUBSYS INIT \
    "$1" ${NT_MPI_ARGS:--b 8 -e 1G -f 32 -g 1 -c 1 -n 3 -w 1} >"$3" 2>&1
}

for s in $stages; do
  echo "=== $s ($(date +%T))"
  case $s in
  torch)
    for m in $modes; do
      t0=$(date +%s)
      torchrun_clients "$m" --cases "$cases" --schedules "$schedules" \
        --case-timeout ${CLIENT_CASE_TIMEOUT:-240} >"$out/clients-$m.log" 2>&1
      echo "$m: exit $? in $(($(date +%s) - t0)) s; $(grep -c '"ok": true' "$out/clients-$m.log") ok," \
        "$(grep -c '"ok": false' "$out/clients-$m.log") failed"
      grep -E '"ok": false|Traceback|Error' "$out/clients-$m.log" | head -4 | cut -c1-300
    done
    ;;
  ntbuild)
    nt_build
    ;;
  nccltests)
    nt_build || exit 1
    nt_each "$ntdir" nccltests nt nt_one
    ;;
  ntmpi)
    nt_build_mpi || exit 1
    nt_each "$ntmdir" nccltests-mpi ntmpi nt_one_mpi
    ;;
  hangdiag)
    m=${DIAG_MODE:-ferry-lazy}
    NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=P2P,INIT CLIENT_TIMEOUT=300 torchrun_clients "$m" \
      --cases pipe --schedules "${DIAG_SCHEDULE:-1F1B}" --case-timeout 280 >"$out/hangdiag-$m.log" 2>&1 &
    sleep ${DIAG_WAIT:-30}
    if grep -q '"case": "pipe' "$out/hangdiag-$m.log"; then
      echo "no hang: $(grep -c '"ok": true' "$out/hangdiag-$m.log") ok"
    else
      for pid in $(pgrep -f "clients.py --tag"); do
        tr '\0' ' ' </proc/$pid/cmdline | grep -q "torch.distributed.run" && continue
        [ "$(cat /proc/$pid/comm 2>/dev/null)" = "python3" ] || continue
        echo "--- pid $pid"
        timeout 60 cuda-gdb -p $pid -batch -ex "thread apply all bt 25" 2>&1 |
          grep -E "^Thread|^#" | grep -vE "in (syscall|__futex|futex_|pthread_cond|__GI_|poll|epoll)" |
          cut -c1-220 | head -120
      done
    fi
    pkill -f "clients.py --tag"
    wait
    grep -E "RESULT|CASE|WARN|Traceback" "$out/hangdiag-$m.log" | head -20 | cut -c1-300
    grep -E "TRACE|INFO" "$out/hangdiag-$m.log" | tail -30 | cut -c1-250
    ;;
  paired)
    # Two modes at the same time, each on its own two GPUs of a 4-GPU
    # machine, swapped every run: a run of one library moves by 30-50% with
    # the machine (both libraries alike), which single runs one after the
    # other cannot tell from a difference between the libraries; two runs
    # side by side share the machine's state. $PAIRED: "modeA:modeB ..."
    # (modeA:modeA is the control: how far apart two equal runs read);
    # $PAIR_RUNS runs of each pair. Tags: modeA-paN and modeB-pbN.
    r=0  # run numbers count on across the pairs: one modeB-pbN per modeA-paN
    for pair in ${PAIRED:-nccl-lazy:ferry-lazy}; do
      a=${pair%%:*} bb=${pair#*:}
      for _ in $(seq 1 ${PAIR_RUNS:-4}); do
        r=$((r + 1))
        ga=0,1 gb=2,3
        [ $((r % 2)) = 0 ] && ga=2,3 gb=0,1
        t0=$(date +%s)
        CUDA_VISIBLE_DEVICES=$ga CLIENT_MASTER_PORT=29510 torchrun_clients "$a" --tag "$a-pa$r" \
          --cases "$cases" --schedules "$schedules" --case-timeout ${CLIENT_CASE_TIMEOUT:-240} \
          >"$out/clients-$a-pa$r.log" 2>&1 &
        CUDA_VISIBLE_DEVICES=$gb CLIENT_MASTER_PORT=29520 torchrun_clients "$bb" --tag "$bb-pb$r" \
          --cases "$cases" --schedules "$schedules" --case-timeout ${CLIENT_CASE_TIMEOUT:-240} \
          >"$out/clients-$bb-pb$r.log" 2>&1
        rb=$?
        wait $!
        ra=$?
        echo "$a-pa$r (GPUs $ga) exit $ra, $bb-pb$r (GPUs $gb) exit $rb, in $(($(date +%s) - t0)) s;" \
          "ok $(cat "$out/clients-$a-pa$r.log" "$out/clients-$bb-pb$r.log" | grep -c '"ok": true')," \
          "failed $(cat "$out/clients-$a-pa$r.log" "$out/clients-$bb-pb$r.log" | grep -c '"ok": false')"
      done
    done
    ;;
  p2pdiag)
    # Under Ferry (SM-free, lazy): per case, who copied each message (pushes
    # and pulls by this rank), peer mappings and staging growth, the result;
    # each case with FERRY_P2P_PUSH_WAIT_US as set and with 0.
    # FERRY_PROFILE=1: each communicator's CPU time per launch phase, printed
    # at its destroy (where a call's host time goes). DIAG_MODES (ferry-lazy),
    # DIAG_DEBUG (INFO; TRACE logs every push wait and staging growth), and
    # DIAG_AB_ENV (CLIENT_AB_ENV for these runs only; none by default).
    for dm in ${DIAG_MODES:-ferry-lazy}; do
      for c in ${DIAG_CASES:-a2a batch blocking}; do
        for pw in ${DIAG_PUSH_WAITS:-500 0}; do
          log="$out/p2pdiag-$dm-$c-$pw.log"
          CLIENT_AB_ENV=${DIAG_AB_ENV:-} FERRY_PROFILE=1 FERRY_P2P_PUSH_WAIT_US=$pw NCCL_DEBUG=${DIAG_DEBUG:-INFO} \
            NCCL_DEBUG_SUBSYS=P2P torchrun_clients "$dm" --tag "$dm-diag" \
            --cases "$c" --schedules "${DIAG_SCHEDULE:-1F1B}" --case-timeout 120 >"$log" 2>&1
          echo "--- $dm, $c, push wait $pw us: exit $?; $(grep -c 'mapped allocation' "$log") mappings," \
            "$(grep -c 'staging grew' "$log") staging growths"
          grep -o "p2p totals.*" "$log" | cut -c1-300
          grep -o "rank [0-9]*: CPU profile.*" "$log" | grep -v "no launches" | cut -c1-600
          grep -h "^RESULT" "$log" | cut -c1-260
        done
      done
    done
    ;;
  death)
    # Rank 1 dies mid-loop (scripts/real_clients/death.py); how long rank 0
    # (and torchrun) take to end, under each library.
    for lib in nccl ferry; do
      rm -f /tmp/ferry-death-stamp
      pre=""
      [ $lib = ferry ] && pre="LD_PRELOAD=$ferry"
      t0=$(date +%s.%N)
      env $pre NCCL_DEBUG=WARN timeout ${DEATH_TIMEOUT:-150} python3 -m torch.distributed.run \
        --nproc-per-node 2 "$here/real_clients/death.py" >"$out/death-$lib.log" 2>&1
      rc=$?
      died=$(cat /tmp/ferry-death-stamp 2>/dev/null || echo nan)
      echo "$lib: torchrun exit $rc, ended $(python3 -c "import time; print(round(time.time() - $died, 1))") s after the death"
      grep -E "NOTICED|DEATH|WRONG|ncclRemoteError|Watchdog caught" "$out/death-$lib.log" | head -5 | cut -c1-300
    done
    ;;
  summary)
    cat "$out"/clients-*.log "$out/nt-results.log" 2>/dev/null >"$out/all-results.log"
    python3 "$here/real_clients/summarize.py" "$out/all-results.log" | tee "$out/clients.md"
    ;;
  esac
done
