# One process driving both GPUs (ncclCommInitAll): the multi-device cases of
# tests/multiproc/multidev_cases.cc on CUDA, lazy and eager module loading,
# SM-free and kernel p2p. Skipped without 2 GPUs.
function(ferry_gpu_multidev_test name case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2 $<TARGET_FILE:mp_multidev> ${case} 2)
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "FERRY_RUNTIME=cuda;${ARGN}")
endfunction()
foreach(case coll p2p mixed nogroup)
  ferry_gpu_multidev_test(gpu.multidev.${case} ${case})
endforeach()
ferry_gpu_multidev_test(gpu.multidev.p2p.eager p2p "CUDA_MODULE_LOADING=EAGER")
ferry_gpu_multidev_test(gpu.multidev.p2p.kernel p2p "NCCL_PASS_SM=0")
ferry_gpu_multidev_test(gpu.multidev.mixed.smfree mixed "FERRY_P2P_KERNEL_MAX_BYTES=0")
# In-place rings (session 25; not yet run on GPUs when written).
ferry_gpu_multidev_test(gpu.multidev.inplace inplace)
ferry_gpu_multidev_test(gpu.multidev.inplace.eager inplace
  "CUDA_MODULE_LOADING=EAGER;FERRY_P2P_KERNEL_MAX_BYTES=0")
# Two processes on two emulated hosts, each driving both GPUs (JAX's
# multi-host clients: one group of ncclCommInitRank per process), every
# case; session 46, not yet run on GPUs when written.
function(ferry_gpu_multidev_hosts_test name case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --hosts 2 --runtime cuda --timeout 280
            $<TARGET_FILE:mp_multidev> ${case} 2)
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()
foreach(case coll p2p mixed inplace threads)
  ferry_gpu_multidev_hosts_test(gpu.multidev.hosts.${case} ${case})
endforeach()
# A thread per GPU, each driving its own communicator (session 46).
ferry_gpu_multidev_test(gpu.multidev.threads threads)
