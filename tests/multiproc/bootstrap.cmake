# Bootstrap (TCP rendezvous) across real processes: bootstrap_mp fork()s its
# ranks itself (no launcher). Exit code 77 = skipped (e.g. no IPv6 address).
add_executable(bootstrap_mp
  ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/bootstrap_mp.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/bootstrap_mp_faults.cc)
target_include_directories(bootstrap_mp PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(bootstrap_mp PRIVATE ferry_core ferry_test_common)

function(ferry_bootstrap_test case nranks)
  add_test(NAME bootstrap.${case}.n${nranks} COMMAND $<TARGET_FILE:bootstrap_mp> ${case} ${nranks})
  set_tests_properties(bootstrap.${case}.n${nranks} PROPERTIES
    LABELS multiproc TIMEOUT 120 SKIP_RETURN_CODE 77
    # WARN lines (the root's reasons for dropping a connection) land in the
    # CI log when a case fails (NOTES.md Open: a rare root_attack failure).
    ENVIRONMENT NCCL_DEBUG=WARN)
endfunction()

foreach(n 1 2 4 8)
  ferry_bootstrap_test(basic ${n})
endforeach()
ferry_bootstrap_test(ipv6 4)
ferry_bootstrap_test(commid 4)
ferry_bootstrap_test(root_attack 4)
ferry_bootstrap_test(ring_attack 4)
ferry_bootstrap_test(missing 4)
ferry_bootstrap_test(duprank 3)
ferry_bootstrap_test(abort 2)
