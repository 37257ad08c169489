# Network connections at init across hosts that NCCL_HOSTID emulates on one
# machine (net_cases.cc): 2 and 4 "hosts" of 2 ranks on the built-in Socket
# engine, a bogus NCCL_NET, and the test net plugin (tests/net/net.cmake).
add_executable(mp_net ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/net_cases.cc
                      ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_util.cc)
target_include_directories(mp_net PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_net PRIVATE ferry_test_buffers ${CMAKE_DL_LIBS})
# The plugin is loaded by path at run time, never linked.
target_compile_definitions(mp_net PRIVATE
  FERRY_TEST_NET_PLUGIN_V11="$<TARGET_FILE:ferry_test_net_plugin_v11>")
add_dependencies(mp_net ferry_test_net_plugin_v11)

# Bounded twice: FERRY_BOOTSTRAP_TIMEOUT (init's connection loop gives up)
# and ferry-run's --timeout (every rank killed).
function(ferry_net_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 60
            $<TARGET_FILE:mp_net> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 90
    ENVIRONMENT "FERRY_BOOTSTRAP_TIMEOUT=30;NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()

ferry_net_test(net.connect.2x2 4 connect)
ferry_net_test(net.initdestroy.4x2 8 initdestroy)
ferry_net_test(net.bogus.2x2 4 bogus)
ferry_net_test(net.badlinks.2x2 4 badlinks)
ferry_net_test(net.plugin.2x2 4 plugin)
# FERRY_NET_GDR with a plugin that takes device memory: messages go between
# the users' buffers and the plugin directly (16 KiB chunks: most messages
# span several); with 2 links, each registers the buffers.
ferry_net_test(net.gdr.2x2 4 gdr "FERRY_NET_GDR=1;FERRY_TEST_NET_PTR_CUDA=1;FERRY_NET_CHUNK_BYTES=16K")
ferry_net_test(net.gdr.striped.2x2 4 gdr
  "FERRY_NET_GDR=1;FERRY_TEST_NET_PTR_CUDA=1;FERRY_NET_CHUNK_BYTES=16K;FERRY_NET_LINKS=2")
# Striped connections (3 links each) connect and log as such.
ferry_net_test(net.connect.striped.2x2 4 connect FERRY_NET_LINKS=3)
# The plugin reports two NICs: connections and ring channels spread over both.
ferry_net_test(net.plugin.2nic.2x2 4 plugin FERRY_TEST_NET_DEVICES=2)

# Point-to-point across emulated hosts: the SM-free suite's own cases
# (p2p_cases.cc) with FERRY_TEST_RANKS_PER_HOST=k, so each rank's peers on
# other "hosts" go through the network engine and the rest through P2P, in
# the same groups. Loopback only (NCCL_SOCKET_IFNAME=lo).
function(ferry_net_p2p_test name nranks perHost case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 280
            $<TARGET_FILE:mp_p2p> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 300
    ENVIRONMENT "FERRY_TEST_RANKS_PER_HOST=${perHost};NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()

ferry_net_p2p_test(net.p2p.alltoall.2x1 2 1 alltoall)
ferry_net_p2p_test(net.p2p.alltoall.4x2 8 2 alltoall FERRY_TEST_EXPECT_KERNEL=0)
ferry_net_p2p_test(net.p2p.stress.2x2 4 2 stress)
ferry_net_p2p_test(net.p2p.unbatched.2x2 4 2 unbatched)
ferry_net_p2p_test(net.p2p.dtypes.3x1 3 1 dtypes)
ferry_net_p2p_test(net.p2p.mixes.2x2 4 2 mixes)
# The proxy and the socket threads napping on every idle pass (no spin
# window): the eventfd wake-ups alone must keep every message moving.
ferry_net_p2p_test(net.p2p.mixes.nospin.2x2 4 2 mixes FERRY_PROXY_SPIN_US=0)
# Eight receives in flight pin two receive staging blocks, not eight (trap 41).
ferry_net_p2p_test(net.p2p.recvdepth.2x1 2 1 recvdepth)
# Twelve sends in flight pin four send staging blocks, waiting for the
# network to free them (the wait raised so that no slow machine runs it out).
ferry_net_p2p_test(net.p2p.senddepth.2x1 2 1 senddepth FERRY_NET_STAGING_WAIT_US=10000000)
# The same on a slow network: the test plugin reports each send done 10 ms
# after the one before, so a message of 9 chunks takes ~90 ms, three times
# the staging wait (30 ms + 0.25 ms per MiB of nothing taken: room for a
# loaded machine's stalls); the wait goes on while chunks keep leaving, and
# the sender still pins four blocks (a bound on the whole wait, as before
# session 36, pinned one per send in flight: checked).
ferry_net_p2p_test(net.p2p.senddepth.paced.2x1 2 1 senddepth
  "FERRY_NET_STAGING_WAIT_US=30000;FERRY_NET_CHUNK_BYTES=128K;FERRY_TEST_NET_SEND_GAP_US=10000;NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v11>;NCCL_NET=ferrytest")
# Twelve sends behind the sender's own busy stream (trap 73): nothing can be
# staged, so none of the bounded waits sees the network move and each send
# past the fourth pins a block; every byte is still right (the staging is
# printed: the cost of never waiting on the own stream).
ferry_net_p2p_test(net.p2p.senddepth.busy.2x1 2 1 senddepthbusy)
# The same under a 9 MiB cap (four blocks of 2 MiB fit, a fifth does not):
# the fifth send waits for the late receiver instead of pinning more.
ferry_net_p2p_test(net.p2p.senddepth.capped.2x1 2 1 senddepthbusy
  "FERRY_NET_STAGING_MAX_BYTES=9M;FERRY_TEST_STAGING_CAP_BYTES=9437184")
# A rank's network connections share their staging blocks (trap 84): one
# message at a time, whichever peer and direction, reuses one block.
ferry_net_p2p_test(net.p2p.sharedstaging.3x1 3 1 sharedstaging FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_net_p2p_test(net.p2p.many.3x1 3 1 many)
ferry_net_p2p_test(net.p2p.self.3x1 3 1 self FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_net_p2p_test(net.p2p.abort.2x1 2 1 abort)
# A soft open-file limit below what the socket engine's connections need:
# init raises it (towards the hard limit) and says so, and the traffic runs.
add_test(NAME net.p2p.fdlimit.3x2
  COMMAND bash -c "h=$(ulimit -Hn); if [ $h != unlimited ] && [ $h -lt 400 ]; then echo \"SKIPPED: hard open-file limit $h\"; exit 77; fi; \
ulimit -Sn 100 && out=$($<TARGET_FILE:ferry-run> -n 6 --runtime host --timeout 100 \
$<TARGET_FILE:mp_p2p> mixes 2>&1); rc=$?; echo \"$out\" | grep -E 'open-file|PASS|FAIL'; \
[ $rc -eq 0 ] && [ $(echo \"$out\" | grep -c 'raised the open-file limit from 100') -eq 6 ]")
set_tests_properties(net.p2p.fdlimit.3x2 PROPERTIES LABELS multiproc TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT
  "FERRY_TEST_RANKS_PER_HOST=2;NCCL_SOCKET_IFNAME=lo;NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=INIT")
ferry_net_p2p_test(net.p2p.pipeline.2x1 2 1 pipeline)
ferry_net_p2p_test(net.p2p.timeout.2x1 2 1 timeout FERRY_P2P_TIMEOUT=2)
# Tiny chunks: many chunks per message (and many groups per copy), so
# staging blocks and in-flight limits are exercised at every size.
ferry_net_p2p_test(net.p2p.stress.smallchunks.2x2 4 2 stress FERRY_NET_CHUNK_BYTES=4K)
# Both ranks receive first, then send, in separate calls on two streams:
# the receive call must not block its caller (trap 29).
ferry_net_p2p_test(net.p2p.recvfirst.2x1 2 1 recvfirst FERRY_NET_CHUNK_BYTES=4K)
# Striping (FERRY_NET_LINKS; 1 by default on the host runtime): each
# connection's chunks go over 3 links, 4 KiB chunks so every message spans
# all of them in turn; the test plugin with 2 links.
ferry_net_p2p_test(net.p2p.striped.stress.2x2 4 2 stress "FERRY_NET_LINKS=3;FERRY_NET_CHUNK_BYTES=4K")
ferry_net_p2p_test(net.p2p.striped.unbatched.2x1 2 1 unbatched "FERRY_NET_LINKS=3;FERRY_NET_CHUNK_BYTES=8K")
ferry_net_p2p_test(net.p2p.striped.plugin.3x1 3 1 alltoall
  "FERRY_NET_LINKS=2;FERRY_NET_CHUNK_BYTES=16K;NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v11>;NCCL_NET=ferrytest")
# The test net plugin carries the bytes (8 requests per comm at most).
ferry_net_p2p_test(net.p2p.alltoall.plugin.3x1 3 1 alltoall
  "NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v11>;NCCL_NET=ferrytest")
ferry_net_p2p_test(net.p2p.alltoall.plugin6.2x1 2 1 alltoall
  "NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v6>;NCCL_NET=ferrytest")

# In-place exchanges across hosts (a receive into the bytes its group
# sends): the receive copies out only after the send was staged.
ferry_net_p2p_test(net.p2p.inplace.2x1 2 1 inplace "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_NET_CHUNK_BYTES=64K")
# Two ranks per host: each ring neighbour on the other side of a host
# boundary (a same-host send sharing bytes with a receive from another host,
# and the other way round); wrong before copyAheadOfNet (session 46).
ferry_net_p2p_test(net.p2p.inplace.2x2 4 2 inplace)
# A small same-host send that must finish before its receiver posts (send,
# synchronize, barrier, receive), as kernel p2p's FIFO lets it on one host:
# staged when first on a communicator spanning hosts (timed out before
# session 46); over P2P and over SHM.
ferry_net_p2p_test(net.p2p.firstuse.2x2 4 2 firstuse)
ferry_net_p2p_test(net.p2p.firstuse.shm.2x2 4 2 firstuse NCCL_P2P_DISABLE=1)
# Self pairs beside same-host and cross-host peers (self sends across
# groups stage when first, as the small same-host ones do).
ferry_net_p2p_test(net.p2p.self.2x2 4 2 self)
# An unmatched same-host send on a communicator spanning hosts times out
# (SM-free at every size: otherwise a 1 MiB send stages and completes).
ferry_net_p2p_test(net.p2p.timeout.2x2 4 2 timeout "FERRY_P2P_TIMEOUT=2;FERRY_P2P_KERNEL_MAX_BYTES=0")
# FERRY_NET_GDR with the test plugin taking device memory: messages of the
# cases' ncclMemAlloc buffers go direct (in-place ones stay staged).
set(gdr "FERRY_NET_GDR=1;FERRY_TEST_NET_PTR_CUDA=1;NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v11>;NCCL_NET=ferrytest")
ferry_net_p2p_test(net.p2p.gdr.alltoall.3x1 3 1 alltoall "${gdr};FERRY_NET_CHUNK_BYTES=64K")
ferry_net_p2p_test(net.p2p.gdr.stress.2x2 4 2 stress "${gdr};FERRY_NET_CHUNK_BYTES=4K;FERRY_NET_LINKS=2")
ferry_net_p2p_test(net.p2p.gdr.mixes.2x1 2 1 mixes "${gdr};FERRY_NET_CHUNK_BYTES=16K")
ferry_net_p2p_test(net.p2p.gdr.inplace.2x1 2 1 inplace
  "${gdr};FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_NET_CHUNK_BYTES=64K")
# Direct receives beside same-host sends of the same bytes (copied aside).
ferry_net_p2p_test(net.p2p.gdr.inplace.2x2 4 2 inplace "${gdr};FERRY_NET_CHUNK_BYTES=64K")

# Kernel p2p across hosts (NCCL_PASS_SM=0): every message is kernel p2p,
# lanes to the other hosts carried by the proxy's persistent hops; the test
# plugin too (8 requests per comm). FERRY_P2P_KERNEL_ACROSS_HOSTS=1 sets the
# lanes up beside the SM-free default, which must keep working.
ferry_net_p2p_test(net.p2p.kernel.alltoall.2x2 4 2 alltoall
  "NCCL_PASS_SM=0;FERRY_TEST_EXPECT_KERNEL=1")
ferry_net_p2p_test(net.p2p.kernel.stress.2x2 4 2 stress NCCL_PASS_SM=0)
ferry_net_p2p_test(net.p2p.kernel.unbatched.2x2 4 2 unbatched NCCL_PASS_SM=0)
ferry_net_p2p_test(net.p2p.kernel.mixes.2x2 4 2 mixes NCCL_PASS_SM=0)
ferry_net_p2p_test(net.p2p.kernel.dtypes.3x1 3 1 dtypes NCCL_PASS_SM=0)
ferry_net_p2p_test(net.p2p.kernel.abort.2x1 2 1 abort NCCL_PASS_SM=0)
ferry_net_p2p_test(net.p2p.kernel.plugin.3x1 3 1 alltoall
  "NCCL_PASS_SM=0;NCCL_NET_PLUGIN=$<TARGET_FILE:ferry_test_net_plugin_v11>;NCCL_NET=ferrytest")
ferry_net_p2p_test(net.p2p.kacross.alltoall.2x2 4 2 alltoall FERRY_P2P_KERNEL_ACROSS_HOSTS=1)

# A peer killed mid-transfer across hosts (p2p_kill.cc forks it).
add_test(NAME net.p2p.peer_killed COMMAND $<TARGET_FILE:mp_p2p_kill> net)
set_tests_properties(net.p2p.peer_killed PROPERTIES LABELS multiproc TIMEOUT 120
  ENVIRONMENT "NCCL_SOCKET_IFNAME=lo")
add_test(NAME net.p2p.peer_killed.striped COMMAND $<TARGET_FILE:mp_p2p_kill> net)
set_tests_properties(net.p2p.peer_killed.striped PROPERTIES LABELS multiproc TIMEOUT 120
  ENVIRONMENT "NCCL_SOCKET_IFNAME=lo;FERRY_NET_LINKS=3;FERRY_NET_CHUNK_BYTES=64K")
ferry_net_test(net.mismatch.2x2 4 mismatch)

# Two network namespaces joined by a veth pair: a real link, no loopback
# (net_veth.sh; skipped where namespaces cannot be made).
add_test(NAME net.p2p.veth.alltoall
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/net_veth.sh $<TARGET_FILE:mp_p2p> alltoall)
set_tests_properties(net.p2p.veth.alltoall PROPERTIES LABELS multiproc TIMEOUT 150
  SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)

# Kernel p2p's lanes across hosts (what send/recv captured into a CUDA graph
# runs on there): made at init on communicators of up to 8 ranks by default,
# not on larger ones unless FERRY_P2P_KERNEL_ACROSS_HOSTS=1, never with =0
# (the INFO lines of ranks that made them counted, over mp_api's inits).
add_test(NAME net.kernellanes.auto
  COMMAND bash -c "lanes() { env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT $1 \
$<TARGET_FILE:ferry-run> -n $2 --hosts $3 --runtime host --timeout 100 $<TARGET_FILE:mp_api> init 2>&1 \
| grep -c 'kernel p2p across hosts: .* hops'; }; \
a=$(lanes X=1 4 2); b=$(lanes X=1 9 3); c=$(lanes FERRY_P2P_KERNEL_ACROSS_HOSTS=1 9 3); \
d=$(lanes FERRY_P2P_KERNEL_ACROSS_HOSTS=0 4 2); \
echo \"INFO lines of lanes made: 2x2 default $a (some expected), 3x3 default $b (none), 3x3 =1 $c (some), 2x2 =0 $d (none)\"; \
[ $a -gt 0 ] && [ $b = 0 ] && [ $c -gt 0 ] && [ $d = 0 ]")
# Three inits per run are enough to count the lanes (the init case's leak
# check runs its 50 in api.cmake's tests).
set_tests_properties(net.kernellanes.auto PROPERTIES LABELS multiproc TIMEOUT 300
  ENVIRONMENT "FERRY_BOOTSTRAP_TIMEOUT=60;NCCL_SOCKET_IFNAME=lo;FERRY_TEST_ROUNDS=3")
# A value other than -1, 0 or 1 fails init on every rank (ncclInvalidArgument).
add_test(NAME net.kernellanes.badvalue.2x2
  COMMAND $<TARGET_FILE:ferry-run> -n 4 --hosts 2 --runtime host --timeout 60
          $<TARGET_FILE:mp_api> badknob)
set_tests_properties(net.kernellanes.badvalue.2x2 PROPERTIES LABELS multiproc TIMEOUT 90
  ENVIRONMENT "FERRY_BOOTSTRAP_TIMEOUT=30;NCCL_SOCKET_IFNAME=lo;FERRY_P2P_KERNEL_ACROSS_HOSTS=2")
