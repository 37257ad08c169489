# What communicators hold (ncclFerryCommMemory): many split communicators,
# the collective ring on first use (NCCL_RUNTIME_CONNECT) and at init.
add_executable(mp_memory ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/memory_cases.cc)
target_include_directories(mp_memory PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_memory PRIVATE nccl ferry_test_buffers)

function(ferry_memory_test name nranks)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 200
            $<TARGET_FILE:mp_memory> ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 240)
endfunction()

ferry_memory_test(api.many_comms.n2 2 many 64)
ferry_memory_test(api.many_comms.n3 3 many 16)
ferry_memory_test(api.many_comms.eager.n2 2 many 8)
set_tests_properties(api.many_comms.eager.n2 PROPERTIES ENVIRONMENT NCCL_RUNTIME_CONNECT=0)
ferry_memory_test(api.window.n2 2 window)
ferry_memory_test(api.window.n3 3 window)
# Window collectives (comm/window_coll.h): 256 KiB shards stand for the
# default 256 MiB threshold on the host runtime; both ops, then the default
# set of ops (broadcast only: the all-gathers run on the ring).
ferry_memory_test(api.wincoll.n2 2 wincoll)
ferry_memory_test(api.wincoll.n3 3 wincoll)
set_tests_properties(api.wincoll.n2 api.wincoll.n3 PROPERTIES ENVIRONMENT
                     "FERRY_WIN_COLL_MIN_BYTES=262144;FERRY_WIN_COLL_OPS=broadcast,allgather")
ferry_memory_test(api.wincoll.bcastonly.n2 2 wincoll)
set_tests_properties(api.wincoll.bcastonly.n2 PROPERTIES ENVIRONMENT FERRY_WIN_COLL_MIN_BYTES=262144)
# A bad FERRY_WIN_COLL_OPS fails init on every rank with a clear error.
ferry_memory_test(api.wincoll.badops.n2 2 badknob)
set_tests_properties(api.wincoll.badops.n2 PROPERTIES ENVIRONMENT FERRY_WIN_COLL_OPS=broadcast,reduce)
# Two emulated hosts: no kernel p2p (init holds nothing: its lanes across
# hosts, made at init on communicators of up to 8 ranks, turned off),
# Simple only (the default there).
add_test(NAME api.many_comms.hosts.2x2
  COMMAND $<TARGET_FILE:ferry-run> -n 4 --hosts 2 --runtime host --timeout 200
          $<TARGET_FILE:mp_memory> many 8)
set_tests_properties(api.many_comms.hosts.2x2 PROPERTIES LABELS multiproc TIMEOUT 240
                     ENVIRONMENT "NCCL_SOCKET_IFNAME=lo;FERRY_P2P_KERNEL_ACROSS_HOSTS=0")
