# The runtime's SM-free point-to-point support on real GPUs: a gtest suite
# (skips without a GPU or without CUDA in the build) and a two-process
# zero-copy program (exit 77 = skipped with fewer than two GPUs), which also
# serves the suite as a loading-mode probe (--loading-mode).
add_executable(gpu_runtime_zc_ipc ${CMAKE_CURRENT_SOURCE_DIR}/gpu/runtime_cuda_zc_ipc.cc)
target_link_libraries(gpu_runtime_zc_ipc PRIVATE ferry_core ferry_test_common)
add_test(NAME runtime.cuda.zc_ipc COMMAND $<TARGET_FILE:gpu_runtime_zc_ipc>)
set_tests_properties(runtime.cuda.zc_ipc PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)

add_executable(gpu_runtime_zc_tests ${CMAKE_CURRENT_SOURCE_DIR}/gpu/runtime_cuda_zc_test.cc)
target_link_libraries(gpu_runtime_zc_tests PRIVATE ferry_core ferry_test_common GTest::gtest_main)
target_compile_definitions(gpu_runtime_zc_tests
  PRIVATE FERRY_ZC_HELPER="$<TARGET_FILE:gpu_runtime_zc_ipc>")
add_dependencies(gpu_runtime_zc_tests gpu_runtime_zc_ipc)
gtest_discover_tests(gpu_runtime_zc_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu TIMEOUT 300)
