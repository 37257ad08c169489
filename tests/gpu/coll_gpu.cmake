# Collectives on 2 GPUs: the host-runtime suite (mp_coll, tests/multiproc/
# coll.cmake) on CUDA, plus float/bf16 sums of 2^24 + 5 elements. Skipped
# (exit 77) without 2 GPUs.
function(ferry_gpu_coll_test name case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 280 $<TARGET_FILE:mp_coll> ${case})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77 ${ARGN})
endfunction()
foreach(case matrix big stress streams abort)
  ferry_gpu_coll_test(gpu.coll.${case} ${case})
endforeach()
# SM-free p2p for every message (small ones would otherwise be kernel p2p).
ferry_gpu_coll_test(gpu.coll.mixed mixed ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_gpu_coll_test(gpu.coll.mixed.kernel mixed ENVIRONMENT NCCL_PASS_SM=0)

# Both protocols at every size: everything through LL (smallest LL FIFO,
# constant wraparound, odd channel count), and nothing through LL.
ferry_gpu_coll_test(gpu.coll.matrix.ll matrix)
set_tests_properties(gpu.coll.matrix.ll PROPERTIES ENVIRONMENT
  "FERRY_COLL_LL_MAX_BYTES=1G;FERRY_COLL_LL_SLOT_BYTES=1K;FERRY_COLL_SLOTS=2;FERRY_COLL_CHANNELS=3;FERRY_COLL_LL_CHANNEL_BYTES=1K")
ferry_gpu_coll_test(gpu.coll.matrix.simple matrix_quick ENVIRONMENT FERRY_COLL_LL_MAX_BYTES=0)
ferry_gpu_coll_test(gpu.coll.abort.ll abort ENVIRONMENT FERRY_COLL_LL_MAX_BYTES=1G)
# Ring regions in host shared memory (no peer access): FIFO slots and LL
# lines cross PCIe (not yet run on a GPU when added, 2026-11-22).
ferry_gpu_coll_test(gpu.coll.matrix.shm matrix_quick ENVIRONMENT NCCL_P2P_DISABLE=1)

# The ring across two emulated hosts (one GPU each where there are two):
# Simple, the default there; LL at every size (its kernel's tail post and
# the receive hops' word-by-word landing, session 30); mixed groups with
# both protocols.
function(ferry_gpu_coll_hosts_test name case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 1
            $<TARGET_FILE:ferry-run> -n 2 --hosts 2 --runtime cuda --timeout 280
            $<TARGET_FILE:mp_coll> ${case})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()
ferry_gpu_coll_hosts_test(gpu.coll.hosts.matrix matrix_quick)
ferry_gpu_coll_hosts_test(gpu.coll.hosts.matrix.ll matrix_quick
                          "FERRY_COLL_LL_MAX_BYTES=1G;FERRY_COLL_NET_LL_MAX_BYTES=1G")
ferry_gpu_coll_hosts_test(gpu.coll.hosts.mixed.ll mixed FERRY_COLL_NET_LL_MAX_BYTES=16K)

# CUDA graph capture and replay of collectives + kernel-p2p fallback.
if(FERRY_CUDA)
  add_executable(gpu_coll_graph ${CMAKE_CURRENT_SOURCE_DIR}/gpu/coll_graph.cu)
  target_link_libraries(gpu_coll_graph PRIVATE nccl CUDA::cudart)
  add_test(NAME gpu.coll.graph
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 150 $<TARGET_FILE:gpu_coll_graph>)
  set_tests_properties(gpu.coll.graph PROPERTIES LABELS gpu TIMEOUT 180 SKIP_RETURN_CODE 77
    ENVIRONMENT "NCCL_DEBUG=INFO;NCCL_DEBUG_SUBSYS=P2P")
  # The same all-reduce graph with the ring crossing two emulated hosts: the
  # proxy's persistent ring hops follow every replay.
  add_test(NAME gpu.coll.graph.hosts
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 1
            $<TARGET_FILE:ferry-run> -n 2 --hosts 2 --runtime cuda --timeout 150
            $<TARGET_FILE:gpu_coll_graph>)
  set_tests_properties(gpu.coll.graph.hosts PROPERTIES LABELS gpu TIMEOUT 180 SKIP_RETURN_CODE 77
    ENVIRONMENT "FERRY_TEST_GRAPH_COLL_ONLY=1;NCCL_SOCKET_IFNAME=lo")
  # All-reduce and send/recv captured across two emulated hosts: kernel p2p's
  # lanes to the other host are persistent proxy hops too.
  add_test(NAME gpu.coll.graph.p2p.hosts
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 1
            $<TARGET_FILE:ferry-run> -n 2 --hosts 2 --runtime cuda --timeout 150
            $<TARGET_FILE:gpu_coll_graph>)
  set_tests_properties(gpu.coll.graph.p2p.hosts PROPERTIES LABELS gpu TIMEOUT 180
    SKIP_RETURN_CODE 77 ENVIRONMENT "FERRY_P2P_KERNEL_ACROSS_HOSTS=1;NCCL_SOCKET_IFNAME=lo")
  # The same with the defaults: a communicator of at most 8 ranks spanning
  # hosts makes those lanes at init (failed with ncclInvalidUsage before
  # session 47, as torch.cuda.graph capturing batch_isend_irecv did).
  add_test(NAME gpu.coll.graph.p2p.hosts.auto
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 1
            $<TARGET_FILE:ferry-run> -n 2 --hosts 2 --runtime cuda --timeout 150
            $<TARGET_FILE:gpu_coll_graph>)
  set_tests_properties(gpu.coll.graph.p2p.hosts.auto PROPERTIES LABELS gpu TIMEOUT 180
    SKIP_RETURN_CODE 77 ENVIRONMENT "NCCL_SOCKET_IFNAME=lo")
  # The first collective inside a global-mode capture: the ring is set up
  # there (on one host, and across two emulated hosts).
  add_test(NAME gpu.coll.graph.first
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 150 $<TARGET_FILE:gpu_coll_graph>)
  set_tests_properties(gpu.coll.graph.first PROPERTIES LABELS gpu TIMEOUT 180
    SKIP_RETURN_CODE 77 ENVIRONMENT "FERRY_TEST_GRAPH_FIRST=1")
  add_test(NAME gpu.coll.graph.first.hosts
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 1
            $<TARGET_FILE:ferry-run> -n 2 --hosts 2 --runtime cuda --timeout 150
            $<TARGET_FILE:gpu_coll_graph>)
  set_tests_properties(gpu.coll.graph.first.hosts PROPERTIES LABELS gpu TIMEOUT 180
    SKIP_RETURN_CODE 77
    ENVIRONMENT "FERRY_TEST_GRAPH_FIRST=1;FERRY_TEST_GRAPH_COLL_ONLY=1;NCCL_SOCKET_IFNAME=lo")
endif()
