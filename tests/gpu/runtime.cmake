# The runtime layer on real CUDA devices: gtest suite (skips without a GPU or
# without CUDA in the build) and a two-process CUDA IPC program (exit 77 =
# skipped when fewer than two GPUs are visible).
set(FERRY_GPU_RUNTIME_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/runtime_cuda_test.cc)
if(FERRY_CUDA)
  list(APPEND FERRY_GPU_RUNTIME_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/runtime_kernels.cu)
endif()
add_executable(gpu_runtime_tests ${FERRY_GPU_RUNTIME_SOURCES})
target_link_libraries(gpu_runtime_tests PRIVATE ferry_core ferry_test_common GTest::gtest_main)
# CMake 3.25 has no C++20 flags for nvcc; the kernel file needs only C++17.
set_target_properties(gpu_runtime_tests PROPERTIES CUDA_STANDARD 17)
gtest_discover_tests(gpu_runtime_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu TIMEOUT 300)

add_executable(gpu_runtime_ipc ${CMAKE_CURRENT_SOURCE_DIR}/gpu/runtime_cuda_ipc.cc)
target_link_libraries(gpu_runtime_ipc PRIVATE ferry_core ferry_test_common)
add_test(NAME runtime.cuda.ipc COMMAND $<TARGET_FILE:gpu_runtime_ipc>)
set_tests_properties(runtime.cuda.ipc PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
