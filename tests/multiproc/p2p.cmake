# SM-free point-to-point across real processes (host runtime in CI; the same
# program runs on CUDA from tests/gpu/p2p_gpu.cmake).
add_executable(mp_p2p ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_cases.cc
                      ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_util.cc
                      ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_staging.cc
                      ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_chain.cc
                      ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_streams.cc)
target_include_directories(mp_p2p PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_p2p PRIVATE ferry_test_buffers)

function(ferry_p2p_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 280
            $<TARGET_FILE:mp_p2p> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 300 ${ARGN})
endfunction()

# p2p.<case>.<suffix>.n<ranks> for each "case:ranks" of the list, all under
# the environment `env` (a ;-list).
function(ferry_p2p_variants suffix env)
  foreach(case_n ${ARGN})
    string(REPLACE ":" ";" cn ${case_n})
    list(GET cn 0 case)
    list(GET cn 1 n)
    ferry_p2p_test(p2p.${case}.${suffix}.n${n} ${n} ${case})
    set_tests_properties(p2p.${case}.${suffix}.n${n} PROPERTIES ENVIRONMENT "${env}")
  endforeach()
endfunction()

# <name>: mp_p2p <case> on <ranks> host-runtime ranks under `env` (a ;-list;
# P2P TRACE added) must pass and print a line matching `pattern` at least
# once: the proof that the path under test ran, which the data checks alone
# cannot give.
function(ferry_p2p_trace_test name ranks case pattern env)
  add_test(NAME ${name}
    COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n ${ranks} --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> ${case} 2>&1) || { echo \"$out\" | tail -20; exit 1; }; \
n=$(echo \"$out\" | grep -c '${pattern}'); echo \"$n lines match: ${pattern}\"; [ \"$n\" -ge 1 ]")
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 120 ENVIRONMENT
    "${env};NCCL_DEBUG=TRACE;NCCL_DEBUG_SUBSYS=P2P")
endfunction()

foreach(n 2 3)
  ferry_p2p_test(p2p.alltoall.n${n} ${n} alltoall)
endforeach()
ferry_p2p_test(p2p.alltoall.n8 8 alltoall ENVIRONMENT FERRY_TEST_ROUNDS=12)
# FERRY_TEST_ROUNDS trims CI's heaviest configurations (the defaults:
# stress 1000 rounds, alltoall 24); the smaller rank counts run them whole.
ferry_p2p_test(p2p.stress.n4 4 stress ENVIRONMENT FERRY_TEST_ROUNDS=400)
ferry_p2p_test(p2p.dtypes.n3 3 dtypes)
ferry_p2p_test(p2p.unbatched.n2 2 unbatched)
ferry_p2p_test(p2p.unbatched.n4 4 unbatched ENVIRONMENT FERRY_P2P_ZERO_COPY=0)
ferry_p2p_test(p2p.mixes.n2 2 mixes)
ferry_p2p_test(p2p.mixes.shm.n3 3 mixes ENVIRONMENT NCCL_P2P_DISABLE=1)
ferry_p2p_test(p2p.abort.n2 2 abort)
ferry_p2p_test(p2p.large.n2 2 large RUN_SERIAL TRUE)
# Many small messages per peer in a group: kernel p2p's small and large
# argument tables (and the SM-free path's in-order matching).
ferry_p2p_test(p2p.many.n3 3 many)
ferry_p2p_test(p2p.many.smfree.n2 2 many ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
# Kernel p2p lanes: messages cut into 1-8 parts (1 KiB per lane), so one
# pair's messages use different lane counts in one group; 8 ranks cap the
# lanes at 4 (the block budget).
ferry_p2p_test(p2p.many.lanes.n3 3 many)
set_tests_properties(p2p.many.lanes.n3 PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_LANES=8;FERRY_P2P_KERNEL_LANE_BYTES=1K")
# 16 lanes (the most; 2 ranks keep them within the block budget).
ferry_p2p_test(p2p.many.lanes16.n2 2 many)
set_tests_properties(p2p.many.lanes16.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_LANES=16;FERRY_P2P_KERNEL_LANE_BYTES=1K")
# The peers' own FIFO size (FERRY_P2P_FIFO_BYTES), apart from the rings':
# 128 KiB over 16 lanes is 4 KiB slots, so most messages wrap a lane's FIFO.
ferry_p2p_test(p2p.many.p2pfifo.n2 2 many)
set_tests_properties(p2p.many.p2pfifo.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_FIFO_BYTES=128K;FERRY_P2P_KERNEL_LANES=16;FERRY_P2P_KERNEL_LANE_BYTES=1K")
foreach(n 3 8)
  ferry_p2p_test(p2p.alltoall.lanes.n${n} ${n} alltoall)
  set(rounds 24)
  if(n EQUAL 8)
    set(rounds 8)
  endif()
  set_tests_properties(p2p.alltoall.lanes.n${n} PROPERTIES ENVIRONMENT
    "NCCL_PASS_SM=0;FERRY_P2P_KERNEL_LANES=8;FERRY_P2P_KERNEL_LANE_BYTES=1K;FERRY_TEST_ROUNDS=${rounds}")
endforeach()
# Every kernel-p2p message of the stress case (<= 64 KiB) over LL, cut into
# 1-8 LL lane parts of 1 KiB or more (several LL slots each: 2 KiB slots);
# then LL off (the FIFO protocol for small messages too).
ferry_p2p_test(p2p.stress.ll.n3 3 stress)
set_tests_properties(p2p.stress.ll.n3 PROPERTIES ENVIRONMENT
  "FERRY_P2P_LL_MAX_BYTES=64K;FERRY_P2P_KERNEL_LANES=8;FERRY_P2P_LL_LANE_BYTES=1K;FERRY_TEST_ROUNDS=300")
ferry_p2p_test(p2p.many.nol.n2 2 many ENVIRONMENT FERRY_P2P_LL_MAX_BYTES=0)
# An LL FIFO that 8 lanes cannot split evenly (2 x 1056 bytes): 128-byte LL
# slots, lane shares rounded to 32 bytes (ring_setup.h p2pLlLaneShare).
ferry_p2p_test(p2p.many.lloddfifo.n2 2 many)
set_tests_properties(p2p.many.lloddfifo.n2 PROPERTIES ENVIRONMENT
  "FERRY_COLL_LL_SLOT_BYTES=1056;FERRY_COLL_SLOTS=2;FERRY_P2P_KERNEL_LANES=8;FERRY_P2P_LL_LANE_BYTES=1K")
ferry_p2p_test(p2p.many.simple.n2 2 many ENVIRONMENT NCCL_PROTO=Simple)
# Kernel p2p's connections on first use per peer: made by the peer's proxy
# while the peer's thread is blocked elsewhere (NCCL_RUNTIME_CONNECT=1, the
# default), FIFO and LL; with =0 everything is made at init.
ferry_p2p_test(p2p.firstuse.n4 4 firstuse)
ferry_p2p_test(p2p.firstuse.simple.n2 2 firstuse ENVIRONMENT NCCL_PROTO=Simple)
ferry_p2p_test(p2p.firstuse.shm.n2 2 firstuse ENVIRONMENT NCCL_P2P_DISABLE=1)
ferry_p2p_test(p2p.firstuse.init.n2 2 firstuse ENVIRONMENT NCCL_RUNTIME_CONNECT=0)
ferry_p2p_test(p2p.many.ncclll.n2 2 many ENVIRONMENT NCCL_P2P_LL_THRESHOLD=2K)
# Two big slots per lane instead of many small ones.
ferry_p2p_test(p2p.stress.laneslots.n2 2 stress)
set_tests_properties(p2p.stress.laneslots.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_LANE_SLOTS=2;FERRY_P2P_KERNEL_LANE_BYTES=4K")

add_executable(mp_p2p_kill ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_kill.cc)
target_include_directories(mp_p2p_kill PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_p2p_kill PRIVATE nccl)
add_test(NAME p2p.peer_killed COMMAND $<TARGET_FILE:mp_p2p_kill>)
set_tests_properties(p2p.peer_killed PROPERTIES LABELS multiproc TIMEOUT 120)

# Staged sends (the lazy-loading-safe mode) on the host runtime.
ferry_p2p_test(p2p.alltoall.staged.n3 3 alltoall)
set_tests_properties(p2p.alltoall.staged.n3 PROPERTIES
  ENVIRONMENT "FERRY_P2P_STAGE_SENDS=1")
ferry_p2p_test(p2p.unbatched.staged.n2 2 unbatched ENVIRONMENT FERRY_P2P_STAGE_SENDS=1)
ferry_p2p_test(p2p.mixes.staged.n2 2 mixes)
set_tests_properties(p2p.mixes.staged.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_ZERO_COPY=0")
ferry_p2p_test(p2p.stress.staged.n3 3 stress)
set_tests_properties(p2p.stress.staged.n3 PROPERTIES
  ENVIRONMENT "FERRY_P2P_STAGE_SENDS=1")
ferry_p2p_test(p2p.swap.staged.n2 2 swap)
set_tests_properties(p2p.swap.staged.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0")
# In-place exchanges (a receive into the send's own bytes, whole or shifted)
# on every path: the default mix, all kernel p2p, all SM-free.
ferry_p2p_test(p2p.inplace.n2 2 inplace)
ferry_p2p_test(p2p.inplace.n3 3 inplace)
ferry_p2p_test(p2p.inplace.kernel.n2 2 inplace ENVIRONMENT NCCL_PASS_SM=0)
ferry_p2p_test(p2p.inplace.smfree.n3 3 inplace ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
# An overlap across the paths: a large SM-free send from the bytes a small
# kernel receive of the same group overwrites (copied aside first).
ferry_p2p_test(p2p.inplacemix.n2 2 inplacemix)
ferry_p2p_test(p2p.inplacemix.n3 3 inplacemix)
ferry_p2p_test(p2p.inplacemix.staged.n2 2 inplacemix ENVIRONMENT FERRY_P2P_STAGE_SENDS=1)
# The send buffer overwritten on the send's stream right after a staged send.
ferry_p2p_test(p2p.overwrite.staged.n2 2 overwrite ENVIRONMENT FERRY_P2P_STAGE_SENDS=1)
# The push wait's floor (FERRY_P2P_PUSH_WAIT_MIN_US) catches a receiver 20 ms
# late, so no send is staged; without the floor the early rank stages.
ferry_p2p_test(p2p.lateexchange.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_MIN_US=200000;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_TEST_EXPECT_PUSHES=1")
ferry_p2p_test(p2p.lateexchange.nofloor.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.nofloor.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_TEST_EXPECT_PUSHES=0")
# The early rank's stream is busy at its push wait (it waits for a token
# the late rank sends after its sleep): FERRY_P2P_PUSH_WAIT_BUSY lets that
# wait take FERRY_P2P_PUSH_WAIT_US whatever the size (the default); its twin
# with the knob at 0 stages.
ferry_p2p_test(p2p.lateexchange.busy.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.busy.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_BUSY=1;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_TEST_BUSY=1;FERRY_TEST_EXPECT_PUSHES=1")
ferry_p2p_test(p2p.lateexchange.busy.off.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.busy.off.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_BUSY=0;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_TEST_BUSY=1;FERRY_TEST_EXPECT_PUSHES=0")
# FERRY_P2P_PUSH_WAIT_BUSY=2 ends a busy wait once the stream goes idle: the
# token comes 5 ms in, 15 ms before the late rank posts, so the early rank
# stages; with 1 it waits on and pushes; with 2 and a stream busy to the
# end it pushes too.
ferry_p2p_test(p2p.lateexchange.busy2.idle.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.busy2.idle.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_BUSY=2;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_TEST_BUSY=1;FERRY_TEST_TOKEN_MS=5;FERRY_TEST_EXPECT_PUSHES=0")
ferry_p2p_test(p2p.lateexchange.busy1.idle.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.busy1.idle.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_BUSY=1;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_TEST_BUSY=1;FERRY_TEST_TOKEN_MS=5;FERRY_TEST_EXPECT_PUSHES=1")
ferry_p2p_test(p2p.lateexchange.busy2.n2 2 lateexchange)
set_tests_properties(p2p.lateexchange.busy2.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_BUSY=2;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_TEST_BUSY=1;FERRY_TEST_EXPECT_PUSHES=1")
# Sends to self paired with receives from self in one group: one direct copy
# each (after the group's other messages with FERRY_P2P_SELF_COPY=2, in
# pieces between a user-stream peer copy's with 3; through the proxy with
# FERRY_P2P_SELF_COPY=0, or staged).
ferry_p2p_test(p2p.self.n3 3 self ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_p2p_test(p2p.self.noselfcopy.n2 2 self)
set_tests_properties(p2p.self.noselfcopy.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY=0")
ferry_p2p_variants(after "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY=2" self:3 alltoall:3)
ferry_p2p_variants(pieces "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY=3" self:2)
# FERRY_P2P_SELF_COPY_ROWS: self copies as strided rows (the cases' odd
# sizes leave a tail for the plain copy); p2p.self.rows.n2 checks that the
# rows path ran, since the copies' results alone cannot tell. The default
# is rows of 4 KiB: "plainself" keeps one plain copy covered.
ferry_p2p_variants(rows "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY_ROWS=64" alltoall:3)
ferry_p2p_variants(plainself "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY_ROWS=0"
  alltoall:3 self:2)
ferry_p2p_variants(rowsafter
  "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY=2;FERRY_P2P_SELF_COPY_ROWS=4096" self:3)
ferry_p2p_trace_test(p2p.self.rows.n2 2 self "copied as rows of 112 bytes"
  "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY_ROWS=112")
ferry_p2p_trace_test(p2p.self.rowsdefault.n2 2 self "copied as rows of 4096 bytes"
  "FERRY_P2P_KERNEL_MAX_BYTES=0")
ferry_p2p_test(p2p.self.staged.n2 2 self)
set_tests_properties(p2p.self.staged.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_STAGE_SENDS=1")
ferry_p2p_test(p2p.ktimeout.n2 2 ktimeout)
set_tests_properties(p2p.ktimeout.n2 PROPERTIES ENVIRONMENT "FERRY_P2P_TIMEOUT=2;NCCL_PASS_SM=0")
# The SM-free path's timeout (its 1 MiB message would otherwise go kernel p2p).
ferry_p2p_test(p2p.timeout.n2 2 timeout)
set_tests_properties(p2p.timeout.n2 PROPERTIES
  ENVIRONMENT "FERRY_P2P_TIMEOUT=2;FERRY_P2P_KERNEL_MAX_BYTES=0")

# Kernel point-to-point (NCCL_PASS_SM=0): the same cases through the kernel
# path's executor (the host runtime runs it on CPU threads).
foreach(case alltoall unbatched mixes stress)
  ferry_p2p_test(p2p.${case}.kernel.n3 3 ${case} ENVIRONMENT NCCL_PASS_SM=0)
endforeach()

# Small messages default to kernel p2p (FERRY_P2P_KERNEL_MAX_BYTES): keep the
# SM-free path covered at every size too.
ferry_p2p_test(p2p.alltoall.smfree.n3 3 alltoall ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_p2p_test(p2p.stress.smfree.n4 4 stress ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_p2p_test(p2p.unbatched.smfree.n2 2 unbatched ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
# GPipe's pattern: 8 unbatched sends run ahead of receives taken one at a time.
ferry_p2p_test(p2p.pipeline.n2 2 pipeline)
# FERRY_P2P_USER_STREAM_COPY (default 1): a stream's only second-side copy
# runs on the user stream (no events); groups with several keep the copy
# streams. The `.nousc.` cases keep the connection-stream path (0) covered;
# the defaults cover the user-stream path. p2p.usc.trace.n2 (unbatched
# orders, data checked) counts the TRACE lines that prove the path ran (8
# on the host runtime; stress.n3 takes it 7 times in 240 copies).
ferry_p2p_variants(nousc
  "FERRY_P2P_USER_STREAM_COPY=0;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_TEST_ROUNDS=40"
  stress:3 alltoall:3 pipeline:2 mixes:2)
ferry_p2p_test(p2p.unbatched.nousc.staged.n2 2 unbatched)
set_tests_properties(p2p.unbatched.nousc.staged.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_USER_STREAM_COPY=0;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_STAGE_SENDS=1")
ferry_p2p_trace_test(p2p.usc.trace.n2 2 unbatched "second side.*on the user stream"
  "FERRY_P2P_USER_STREAM_COPY=1;FERRY_P2P_KERNEL_MAX_BYTES=0")
# ...but never beside a self copy on the same stream (all-to-all's own
# block): the two run side by side on different streams (4 of the copies in
# this run went to the user stream before that rule).
add_test(NAME p2p.usc.self.n2
  COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> alltoall 2>&1) || { echo \"$out\" | tail -20; exit 1; }; \
u=$(echo \"$out\" | grep -c 'second side.*on the user stream'); s=$(echo \"$out\" | grep -c 'self: '); \
echo \"$u user-stream copies, $s launches with self copies\"; [ \"$u\" -eq 0 ] && [ \"$s\" -ge 1 ]")
set_tests_properties(p2p.usc.self.n2 PROPERTIES LABELS multiproc TIMEOUT 120 ENVIRONMENT
  "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_TEST_ROUNDS=5;NCCL_DEBUG=TRACE;NCCL_DEBUG_SUBSYS=P2P")
# FERRY_P2P_SELF_COPY=3: a 2-rank all-to-all's one peer copy goes to the user
# stream, and carries the own block's copy in pieces between its own.
ferry_p2p_trace_test(p2p.usc.selfpieces.n2 2 alltoall "copied in 8 pieces between those of"
  "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY=3;FERRY_P2P_PUSH_WAIT_US=200000;FERRY_P2P_PUSH_WAIT_MIN_US=200000")
# A receiver late by habit: the staged sender stops its bounded push wait
# after 3 misses in a row (P2pEngine::awaitReceiver), so of its 8 sends at
# most 4 wait (the first may find its receive posted); without that rule
# all 7 late ones would. The profile counts the waits; 100 ms pauses keep
# the receiver late even on a loaded CI machine.
add_test(NAME p2p.pipeline.latewait.n2
  COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> pipeline 2>&1) || { echo \"$out\"; exit 1; }; echo \"$out\" | grep -E 'CPU profile|pipeline'; \
n=$(echo \"$out\" | grep -oE 'p2p\\.pushwait n=[0-9]+' | grep -oE '[0-9]+$'); [ -n \"$n\" ] && [ \"$n\" -ge 1 ] && [ \"$n\" -le 4 ]")
set_tests_properties(p2p.pipeline.latewait.n2 PROPERTIES LABELS multiproc TIMEOUT 120 ENVIRONMENT
  "FERRY_PROFILE=1;NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=P2P;FERRY_P2P_STAGE_SENDS=1;FERRY_TEST_PAUSE_MS=100")
# The retries of a receiver late by habit, over 64 sends of 1 MiB: every 8th
# message waits again (waits at 0-3, 11, 19, ..., 59: 10-11), or, with
# FERRY_P2P_PUSH_RETRY_MAX=256, the interval doubles after each retry that
# misses (0-3, 11, 27, 59: 6-7). The profile counts the waits.
foreach(variant "default;8;9;64" "backoff;256;4;8")
  list(GET variant 0 name)
  list(GET variant 1 max)
  list(GET variant 2 low)
  list(GET variant 3 high)
  add_test(NAME p2p.pipeline.retry.${name}.n2
    COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> pipeline 2>&1) || { echo \"$out\"; exit 1; }; echo \"$out\" | grep -E 'CPU profile|pipeline'; \
n=$(echo \"$out\" | grep -oE 'p2p\\.pushwait n=[0-9]+' | grep -oE '[0-9]+$'); echo \"$n push waits\"; \
[ -n \"$n\" ] && [ \"$n\" -ge ${low} ] && [ \"$n\" -le ${high} ]")
  set_tests_properties(p2p.pipeline.retry.${name}.n2 PROPERTIES LABELS multiproc TIMEOUT 120
    ENVIRONMENT "FERRY_PROFILE=1;NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=P2P;FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_TEST_PAUSE_MS=20;FERRY_TEST_PIPE_MSGS=64;FERRY_TEST_PIPE_MIB=1;FERRY_P2P_PUSH_RETRY_MAX=${max}")
endforeach()
# FERRY_P2P_PUSH_WAIT_STAGED=0: the same pipeline's sends are not exchanges,
# so none waits (no p2p.pushwait in the profile), and every byte still lands.
add_test(NAME p2p.pipeline.nostagedwait.n2
  COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> pipeline 2>&1) || { echo \"$out\"; exit 1; }; echo \"$out\" | grep -E 'CPU profile|pipeline'; \
echo \"$out\" | grep -q 'CPU profile' && ! echo \"$out\" | grep -qE 'p2p\\.pushwait n='")
set_tests_properties(p2p.pipeline.nostagedwait.n2 PROPERTIES LABELS multiproc TIMEOUT 120 ENVIRONMENT
  "FERRY_PROFILE=1;NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=P2P;FERRY_P2P_STAGE_SENDS=1;FERRY_TEST_PAUSE_MS=100;FERRY_P2P_PUSH_WAIT_STAGED=0")
# A launch's push waits share one bound (FERRY_P2P_PUSH_WAIT_US, 40 ms here):
# rank 0 exchanges with 3 peers that post 150 ms late, twice, so its waits
# total ~80 ms; one bound per peer would be ~240 ms (p2p_util.cc latemany).
add_test(NAME p2p.pushwait.launch.n4
  COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n 4 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> latemany 2>&1) || { echo \"$out\" | tail -20; exit 1; }; echo \"$out\" | grep -oE 'p2p\\.pushwait [^;]*'; \
ms=$(echo \"$out\" | grep -oE 'p2p\\.pushwait n=[0-9]+ avg=[0-9.]+' | awk -F'[= ]' '{t += $3 * $5} END {printf \"%d\", t / 1000}'); \
echo \"push waits: $ms ms in all\"; [ -n \"$ms\" ] && [ \"$ms\" -ge 40 ] && [ \"$ms\" -le 160 ]")
set_tests_properties(p2p.pushwait.launch.n4 PROPERTIES LABELS multiproc TIMEOUT 120 ENVIRONMENT
  "FERRY_PROFILE=1;NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=P2P;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_PUSH_WAIT_US=40000;FERRY_P2P_PUSH_WAIT_MIN_US=40000")
# FERRY_PROFILE: every rank prints its communicator's CPU profile at destroy,
# with the kernel-p2p launches and each SM-free phase counted.
add_test(NAME p2p.profile.n2
  COMMAND bash -c "set -o pipefail; out=$($<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> alltoall 2>&1) || { echo \"$out\"; exit 1; }; echo \"$out\" | grep 'CPU profile'; \
[ $(echo \"$out\" | grep -cE 'CPU profile \\(FERRY_PROFILE\\): .*groupend n=[1-9].*p2p\\.smfree n=[1-9].*p2p\\.claim n=[1-9].*p2p\\.map n=[1-9].*p2p\\.ready n=[1-9].*p2p\\.userwaits n=[1-9]') -ge 2 ] && \
echo \"$out\" | grep -qE 'CPU profile .*p2p\\.kernel n=[1-9]'")
set_tests_properties(p2p.profile.n2 PROPERTIES LABELS multiproc TIMEOUT 120 ENVIRONMENT
  "FERRY_PROFILE=1;NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=P2P;FERRY_P2P_KERNEL_MAX_BYTES=4K;FERRY_TEST_ROUNDS=24")
# Staged sends far ahead of their receiver fill the pool up to
# FERRY_P2P_STAGING_MAX_BYTES, then wait for the receiver (session 26); with
# a 1 ms bound the pool grows past the cap instead (a soft cap, no hang).
ferry_p2p_test(p2p.stagingcap.n2 2 stagingcap)
set_tests_properties(p2p.stagingcap.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_STAGING_MAX_BYTES=8388608;FERRY_P2P_STAGING_WAIT_MS=10000")
# FERRY_P2P_STAGING_GROW_WAIT_US=0: under the cap the pool grows at once;
# the cap still holds.
ferry_p2p_test(p2p.stagingcap.nogrowwait.n2 2 stagingcap)
set_tests_properties(p2p.stagingcap.nogrowwait.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_STAGING_MAX_BYTES=8388608;FERRY_P2P_STAGING_WAIT_MS=10000;FERRY_P2P_STAGING_GROW_WAIT_US=0")
ferry_p2p_test(p2p.stagingcap.soft.n2 2 stagingcap)
set_tests_properties(p2p.stagingcap.soft.n2 PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_STAGING_MAX_BYTES=8388608;FERRY_P2P_STAGING_WAIT_MS=1;FERRY_TEST_EXPECT_SOFT=1")
# A launch's copies to two peers whose receivers depend on each other
# through that launch (p2p_chain.cc): each copy waits only for its own
# receiver, never behind another's (trap 61: chaining them deadlocks).
ferry_p2p_test(p2p.chain.n3 3 chain)
set_tests_properties(p2p.chain.n3 PROPERTIES ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0")
# A new user stream for every exchange, past the engine's 64 remembered
# fences, some left pending (p2p_streams.cc); SM-free at every size.
ferry_p2p_test(p2p.newstreams.n2 2 newstreams ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
