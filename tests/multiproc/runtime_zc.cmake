# Zero-copy support of the runtime across two real processes on the host
# runtime: describeAllocation + exportAllocationFd + whole-allocation import,
# and registered memfd control words (writeValue64 -> waitValue64Spin).
add_executable(mp_runtime_zc ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/runtime_zc.cc)
target_link_libraries(mp_runtime_zc PRIVATE ferry_core ferry_test_common)
add_test(NAME runtime.zc.host COMMAND $<TARGET_FILE:mp_runtime_zc>)
set_tests_properties(runtime.zc.host PROPERTIES LABELS multiproc TIMEOUT 120)
