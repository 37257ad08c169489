# ABI: the exported symbol table of libnccl.so.2 and libferry.so.
add_test(NAME abi.symbols.libnccl
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_symbols.sh $<TARGET_FILE:nccl> ${CMAKE_SOURCE_DIR})
add_test(NAME abi.symbols.libferry
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_symbols.sh $<TARGET_FILE:ferry> ${CMAKE_SOURCE_DIR})
set_tests_properties(abi.symbols.libnccl abi.symbols.libferry PROPERTIES LABELS unit)

# The public API across real processes on the host runtime, through ferry-run.
add_executable(mp_api ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/api_cases.cc)
target_include_directories(mp_api PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_api PRIVATE nccl ferry_test_common)

function(ferry_api_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 240
            $<TARGET_FILE:mp_api> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 300 ${ARGN})
endfunction()

foreach(n 2 4 8)
  ferry_api_test(api.init.n${n} ${n} init)
  ferry_api_test(api.split.n${n} ${n} split)
endforeach()
foreach(n 1 2 4)
  ferry_api_test(api.nonblocking.n${n} ${n} nonblocking)
endforeach()
ferry_api_test(api.split.n3 3 split)
ferry_api_test(api.abort.n2 2 abort)
ferry_api_test(api.badargs.n1 1 badargs)
ferry_api_test(api.initall.n1 1 initall)
ferry_api_test(api.missing.n2 2 missing ENVIRONMENT FERRY_BOOTSTRAP_TIMEOUT=2)
ferry_api_test(api.duprank.n3 3 duprank ENVIRONMENT FERRY_BOOTSTRAP_TIMEOUT=5)
# Malformed connection knobs: init fails on every rank with a clear error.
ferry_api_test(api.badknob.lanes.n2 2 badknob ENVIRONMENT FERRY_P2P_KERNEL_LANES=3)
ferry_api_test(api.badknob.laneslots.n2 2 badknob ENVIRONMENT FERRY_P2P_KERNEL_LANE_SLOTS=3)
ferry_api_test(api.badknob.lanebytes.n2 2 badknob ENVIRONMENT FERRY_P2P_KERNEL_LANE_BYTES=100)
ferry_api_test(api.badknob.slots.n2 2 badknob ENVIRONMENT FERRY_COLL_SLOTS=3)
ferry_api_test(api.badknob.p2pfifo.n2 2 badknob ENVIRONMENT FERRY_P2P_FIFO_BYTES=100000)
# A knob every rank must set alike, set differently by one rank: init fails
# on every rank with ncclInvalidUsage naming it (instead of a hang later).
# The second sets a default on one rank only: NCCL_P2P_LL_THRESHOLD means
# something else once set, so an explicit default is refused too.
ferry_api_test(api.knobmismatch.kmax.n3 3 knobmismatch)
ferry_api_test(api.knobmismatch.explicit.n2 2 knobmismatch)
ferry_api_test(api.knobmismatch.proto.n2 2 knobmismatch)
set_tests_properties(api.knobmismatch.kmax.n3 PROPERTIES ENVIRONMENT
  "FERRY_TEST_RANK_ENV=2:FERRY_P2P_KERNEL_MAX_BYTES=1M;FERRY_TEST_KNOB=FERRY_P2P_KERNEL_MAX_BYTES")
set_tests_properties(api.knobmismatch.explicit.n2 PROPERTIES ENVIRONMENT
  "FERRY_TEST_RANK_ENV=1:NCCL_P2P_LL_THRESHOLD=16K;FERRY_TEST_KNOB=NCCL_P2P_LL_THRESHOLD")
set_tests_properties(api.knobmismatch.proto.n2 PROPERTIES ENVIRONMENT
  "FERRY_TEST_RANK_ENV=0:NCCL_PROTO=LL|1:NCCL_PROTO=Simple;FERRY_TEST_KNOB=NCCL_PROTO")
