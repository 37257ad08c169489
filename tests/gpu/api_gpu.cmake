# The communicator suite of tests/multiproc/api.cmake on the CUDA runtime:
# 2 ranks, one GPU each, and CommInitAll over 2 devices. Skipped (not passed)
# without enough GPUs.
function(ferry_gpu_api_test name nranks ngpus case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh ${ngpus}
            $<TARGET_FILE:ferry-run> -n ${nranks} --runtime cuda --timeout 240
            $<TARGET_FILE:mp_api> ${case})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77 ${ARGN})
endfunction()

foreach(case init split nonblocking abort)
  ferry_gpu_api_test(gpu.api.${case}.n2 2 2 ${case})
endforeach()
ferry_gpu_api_test(gpu.api.badargs.n1 1 1 badargs)
ferry_gpu_api_test(gpu.api.initall.n1 1 2 initall)
ferry_gpu_api_test(gpu.api.missing.n2 2 2 missing ENVIRONMENT FERRY_BOOTSTRAP_TIMEOUT=2)
# Memory per communicator and windows (tests/multiproc/memory.cmake) on GPUs:
# the collective ring on first use holds no FIFOs in p2p-only communicators;
# windows of ncclMemAlloc memory are mapped by the peer at registration.
function(ferry_gpu_memory_test name nranks ngpus)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh ${ngpus}
            $<TARGET_FILE:ferry-run> -n ${nranks} --runtime cuda --timeout 240
            $<TARGET_FILE:mp_memory> ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
endfunction()
ferry_gpu_memory_test(gpu.api.many_comms.n2 2 2 many 64)
ferry_gpu_memory_test(gpu.api.window.n2 2 2 window)
# Window sends must go straight from window to window: no staging of sends
# that arrive before their receiver (the lazy-loading default on CUDA).
set_tests_properties(gpu.api.window.n2 PROPERTIES ENVIRONMENT FERRY_P2P_STAGE_SENDS=0)
# Window collectives (comm/window_coll.h), both ops from 16 MiB (the default
# is broadcast only, from 256 MiB), under lazy loading as users run them (a
# send that arrives first is staged).
ferry_gpu_memory_test(gpu.api.wincoll.n2 2 2 wincoll)
set_tests_properties(gpu.api.wincoll.n2 PROPERTIES ENVIRONMENT
                     "FERRY_WIN_COLL_MIN_BYTES=16777216;FERRY_WIN_COLL_OPS=broadcast,allgather")
# The recovery and planning calls (tests/multiproc/recovery.cmake) on GPUs:
# ncclCommInitRankScalable, ncclCommShrink (both flags), ncclCommRevoke and
# ncclGroupSimulateEnd, device buffers.
foreach(case scalable shrink revoke simulate)
  add_test(NAME gpu.api.${case}.n2
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 240
            $<TARGET_FILE:mp_recovery> ${case})
  set_tests_properties(gpu.api.${case}.n2 PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
