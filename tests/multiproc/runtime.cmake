# Runtime layer across real processes on the host runtime (memfd IPC over a
# Unix socket, stream memory operations on shared words).
add_executable(mp_runtime_ipc ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/runtime_ipc.cc)
target_link_libraries(mp_runtime_ipc PRIVATE ferry_core ferry_test_common)
add_test(NAME runtime.ipc.host COMMAND $<TARGET_FILE:mp_runtime_ipc>)
set_tests_properties(runtime.ipc.host PROPERTIES LABELS multiproc TIMEOUT 120)
