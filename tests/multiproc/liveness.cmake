# Dead peers (comm/liveness.h): a rank of four dies mid-loop and every
# survivor must get ncclRemoteError, naming it, within 30 s; a rank that
# leaves on purpose (normal exit, no destroy) must fail nobody.
add_executable(mp_peer_death ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/peer_death.cc)
target_include_directories(mp_peer_death PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_peer_death PRIVATE nccl)
foreach(mode coll smfree kernel net netkernel hier silent graceful shrink forked wincoll)
  add_test(NAME liveness.peer_death.${mode} COMMAND $<TARGET_FILE:mp_peer_death> ${mode})
  set_tests_properties(liveness.peer_death.${mode} PROPERTIES LABELS multiproc TIMEOUT 150)
endforeach()
set_tests_properties(liveness.peer_death.wincoll PROPERTIES ENVIRONMENT
                     "FERRY_WIN_COLL_MIN_BYTES=65536;FERRY_WIN_COLL_OPS=allgather")
