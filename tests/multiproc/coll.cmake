# Collectives across real processes (host runtime in CI; the same program
# runs on CUDA from tests/gpu/coll_gpu.cmake). Cases: see coll_cases.cc.
add_executable(mp_coll ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/coll_cases.cc
                       ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/coll_util.cc
                       ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/coll_ref.cc
                       ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_util.cc)
target_include_directories(mp_coll PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_coll PRIVATE ferry_test_buffers)
if(FERRY_CUDA)
  # cudaStreamCreate streams and upload fences on the CUDA runtime
  target_compile_definitions(mp_coll PRIVATE FERRY_TEST_CUDA=1)
endif()

function(ferry_coll_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 280
            $<TARGET_FILE:mp_coll> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 300 ${ARGN})
endfunction()

ferry_coll_test(coll.matrix.n2 2 matrix)
ferry_coll_test(coll.matrix.n3 3 matrix)
# 8 ranks: every small count; the 2^20+3 references cost ~70 s on 2 cores.
ferry_coll_test(coll.matrix.n8 8 matrix_quick)
ferry_coll_test(coll.stress.n4 4 stress)
# Mixed groups (all-reduce + sends/recvs of 0..64 KiB): SM-free p2p (small
# messages forced off the kernel path), kernel p2p (NCCL_PASS_SM=0), and the
# default split; 8 ranks for the eight-GPU scenarios of issue 6.
ferry_coll_test(coll.mixed.n3 3 mixed ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_coll_test(coll.mixed.kernel.n3 3 mixed ENVIRONMENT NCCL_PASS_SM=0)
ferry_coll_test(coll.mixed.default.n3 3 mixed ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=16K)
# 8 ranks: 400 and 300 groups (FERRY_TEST_ROUNDS) instead of 1000, for CI's time.
ferry_coll_test(coll.mixed.n8 8 mixed)
set_tests_properties(coll.mixed.n8 PROPERTIES ENVIRONMENT
  "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_TEST_ROUNDS=400")
ferry_coll_test(coll.mixed.kernel.n8 8 mixed)
set_tests_properties(coll.mixed.kernel.n8 PROPERTIES ENVIRONMENT
  "NCCL_PASS_SM=0;FERRY_TEST_ROUNDS=300")
ferry_coll_test(coll.streams.n2 2 streams)
ferry_coll_test(coll.abort.n3 3 abort)
# Flow-control edge cases: the smallest FIFO (2 slots of 1 KiB, so chunks of
# one slot and constant wraparound) over an odd number of channels, and the
# SHM variant of the ring regions.
ferry_coll_test(coll.matrix.tinyfifo.n3 3 matrix)
set_tests_properties(coll.matrix.tinyfifo.n3 PROPERTIES
  ENVIRONMENT "FERRY_COLL_SLOTS=2;FERRY_COLL_SLOT_BYTES=1K;FERRY_COLL_CHANNELS=3")
ferry_coll_test(coll.stress.tinyfifo.n4 4 stress)
set_tests_properties(coll.stress.tinyfifo.n4 PROPERTIES
  ENVIRONMENT "FERRY_COLL_SLOTS=2;FERRY_COLL_SLOT_BYTES=1K;FERRY_COLL_CHANNELS=5;NCCL_PASS_SM=0")
ferry_coll_test(coll.matrix.shm.n2 2 matrix_quick ENVIRONMENT NCCL_P2P_DISABLE=1)
# Protocols: every size through LL with the smallest LL FIFO (2 slots of
# 1 KiB: 32 elements of 16 bytes a step, constant wraparound) over an odd
# number of channels; the FIFO protocol at the sizes LL takes by default;
# abort while an LL collective waits.
ferry_coll_test(coll.matrix.ll.n3 3 matrix)
set_tests_properties(coll.matrix.ll.n3 PROPERTIES ENVIRONMENT
  "FERRY_COLL_LL_MAX_BYTES=1G;FERRY_COLL_LL_SLOT_BYTES=1K;FERRY_COLL_SLOTS=2;FERRY_COLL_CHANNELS=3;FERRY_COLL_LL_CHANNEL_BYTES=1K")
ferry_coll_test(coll.matrix.simple.n2 2 matrix_quick ENVIRONMENT FERRY_COLL_LL_MAX_BYTES=0)
ferry_coll_test(coll.abort.ll.n3 3 abort ENVIRONMENT FERRY_COLL_LL_MAX_BYTES=1G)
# Every collective wait has a limit: a rank that never joins makes the
# others' streams fail after FERRY_COLL_TIMEOUT, in both protocols.
ferry_coll_test(coll.timeout.ll.n3 3 timeout ENVIRONMENT FERRY_COLL_TIMEOUT=2)
ferry_coll_test(coll.timeout.simple.n3 3 timeout)
set_tests_properties(coll.timeout.simple.n3 PROPERTIES ENVIRONMENT
  "FERRY_COLL_TIMEOUT=2;FERRY_COLL_LL_MAX_BYTES=0")
# User controls: NCCL_PROTO forcing each protocol for every size, and the
# SM budget (NCCL_MAX_CTAS) capping the channels at one.
ferry_coll_test(coll.matrix.proto_ll.n2 2 matrix_quick ENVIRONMENT NCCL_PROTO=LL)
ferry_coll_test(coll.matrix.proto_simple.n2 2 matrix_quick ENVIRONMENT NCCL_PROTO=^LL)
ferry_coll_test(coll.matrix.maxctas.n3 3 matrix_quick ENVIRONMENT NCCL_MAX_CTAS=1)
# Ranks asking for different maxCTAs (NCCL_MAX_CTAS 1, unset, 3 over 4
# channels): every rank runs the smallest, so the rings still line up.
ferry_coll_test(coll.matrix.maxctas.mixed.n3 3 matrix_quick)
set_tests_properties(coll.matrix.maxctas.mixed.n3 PROPERTIES
  ENVIRONMENT "FERRY_COLL_CHANNELS=4;FERRY_TEST_RANK_ENV=0:NCCL_MAX_CTAS=1|2:NCCL_MAX_CTAS=3")

# Collectives across hosts (coll/ring_net.h): ranks on emulated hosts
# (ferry-run --hosts, loopback sockets); the ring's hops between hosts are
# carried by the proxy. Hosts x ranks per host: 1x2 ... 4x2, one rank per
# host, the smallest FIFO (constant wraparound across the network), mixed
# groups with point-to-point, the stress mix, an abort.
function(ferry_coll_hosts_test name nranks hosts case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --hosts ${hosts} --runtime host --timeout 280
            $<TARGET_FILE:mp_coll> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 300
                       ENVIRONMENT "NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()
# Every datatype crosses hosts in 2x2 and 2x1; the larger layouts test the
# rings over 3 and 4 hosts with one type of each element size (CI's time).
set(ferry_layout_types "FERRY_TEST_TYPES=int8,bfloat16,float32,float64")
ferry_coll_hosts_test(coll.hosts.matrix.2x2 4 2 matrix_quick)
ferry_coll_hosts_test(coll.hosts.matrix.3x2 6 3 matrix_quick ${ferry_layout_types})
ferry_coll_hosts_test(coll.hosts.matrix.4x2 8 4 matrix_quick ${ferry_layout_types})
ferry_coll_hosts_test(coll.hosts.matrix.2x1 2 2 matrix_quick)
ferry_coll_hosts_test(coll.hosts.matrix.tinyfifo.2x1 2 2 matrix_quick
  "FERRY_COLL_SLOTS=2;FERRY_COLL_SLOT_BYTES=1K;FERRY_COLL_CHANNELS=3")
# The full matrix's large count (2^20 + 3 elements): across hosts a
# collective takes several channels only once each hop carries >= 128 KiB
# (coll_engine.cc simpleCollChannels), which the quick matrix never reaches.
ferry_coll_hosts_test(coll.hosts.matrix.full.2x1 2 2 matrix)
# The same through a net plugin (the test tree's own): rings across hosts
# over a plugin keep one channel per 64 KiB (the hop rule is the built-in
# sockets'), so this also runs the older channel counts across hosts.
ferry_coll_hosts_test(coll.hosts.matrix.plugin.2x1 2 2 matrix
  "NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v11>;NCCL_NET=ferrytest")
# Both protocols cross hosts (Simple only by default there): every size
# through LL with its smallest FIFO (2 slots of 1 KiB: constant wraparound
# of the lines across the network) over an odd number of channels; LL
# forced by NCCL_PROTO; both protocols in one run of mixed groups; an abort
# while an LL collective waits across hosts.
ferry_coll_hosts_test(coll.hosts.matrix.ll.2x2 4 2 matrix_quick
  "FERRY_COLL_LL_MAX_BYTES=1G;FERRY_COLL_NET_LL_MAX_BYTES=1G;FERRY_COLL_LL_SLOT_BYTES=1K;FERRY_COLL_SLOTS=2;FERRY_COLL_CHANNELS=3;FERRY_COLL_LL_CHANNEL_BYTES=1K")
ferry_coll_hosts_test(coll.hosts.matrix.proto_ll.2x1 2 2 matrix_quick NCCL_PROTO=LL)
ferry_coll_hosts_test(coll.hosts.mixed.ll.2x1 2 2 mixed FERRY_COLL_NET_LL_MAX_BYTES=16K)
ferry_coll_hosts_test(coll.hosts.abort.ll.2x2 4 2 abort
  "FERRY_COLL_LL_MAX_BYTES=1G;FERRY_COLL_NET_LL_MAX_BYTES=1G")
ferry_coll_hosts_test(coll.hosts.mixed.2x2 4 2 mixed)
# Ring hops stepped by a proxy that naps on every idle pass (no spin window).
ferry_coll_hosts_test(coll.hosts.mixed.nospin.2x1 2 2 mixed FERRY_PROXY_SPIN_US=0)
ferry_coll_hosts_test(coll.hosts.stress.3x2 6 3 stress)
ferry_coll_hosts_test(coll.hosts.abort.2x2 4 2 abort)
# The hierarchical all-reduce (comm/hier_allreduce.h), forced by NCCL_ALGO
# (the host runtime's cost model keeps the ring): 2 and 3 hosts of 2, 2 of
# 3 and of 4 (the shards' remainder differs; every op, every type at 2x2 and
# one of each element size elsewhere), mixed groups with
# point-to-point, an abort during it; and shapes it cannot serve (3 ranks on
# 2 hosts; NCCL_ALGO=Ring), where every all-reduce must stay on the ring.
ferry_coll_hosts_test(coll.hosts.hier.2x2 4 2 hier "NCCL_ALGO=Tree;FERRY_TEST_EXPECT_HIER=1")
ferry_coll_hosts_test(coll.hosts.hier.3x2 6 3 hier
  "NCCL_ALGO=allreduce:tree;FERRY_TEST_EXPECT_HIER=1;${ferry_layout_types}")
ferry_coll_hosts_test(coll.hosts.hier.2x3 6 2 hier "NCCL_ALGO=^ring;FERRY_TEST_EXPECT_HIER=1;${ferry_layout_types}")
ferry_coll_hosts_test(coll.hosts.hier.2x4 8 2 hier "NCCL_ALGO=Hier;FERRY_TEST_EXPECT_HIER=1;${ferry_layout_types}")
ferry_coll_hosts_test(coll.hosts.hier.uneven.3on2 3 2 hier "NCCL_ALGO=Tree;FERRY_TEST_EXPECT_HIER=0")
ferry_coll_hosts_test(coll.hosts.hier.ring.2x2 4 2 hier "NCCL_ALGO=Ring;FERRY_TEST_EXPECT_HIER=0")
ferry_coll_hosts_test(coll.hosts.hier.mixed.2x2 4 2 mixed NCCL_ALGO=Tree)
ferry_coll_hosts_test(coll.hosts.hier.abort.2x2 4 2 abort NCCL_ALGO=Tree)
