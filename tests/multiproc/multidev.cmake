# One process driving several devices (ncclCommInitAll; nccl-tests -g N,
# JAX-style programs): groups spanning every communicator, every collective
# and point-to-point operation, streams per device, a different device
# current at every call (multidev_cases.cc). On the host runtime, which
# enforces CUDA's device rules for streams, events and kernels.
add_executable(mp_multidev ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/multidev_cases.cc
                           ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/coll_util.cc
                           ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/coll_ref.cc
                           ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_util.cc)
target_include_directories(mp_multidev PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_multidev PRIVATE ferry_test_buffers)
if(FERRY_CUDA)
  target_compile_definitions(mp_multidev PRIVATE FERRY_TEST_CUDA=1)
endif()

function(ferry_multidev_test name case ndev)
  add_test(NAME ${name} COMMAND $<TARGET_FILE:mp_multidev> ${case} ${ndev})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "FERRY_RUNTIME=host;FERRY_HOST_DEVICES=${ndev};${ARGN}")
endfunction()

foreach(case coll p2p mixed nogroup)
  ferry_multidev_test(multidev.${case}.n4 ${case} 4)
endforeach()
ferry_multidev_test(multidev.coll.n2 coll 2)
ferry_multidev_test(multidev.p2p.kernel.n3 p2p 3 "NCCL_PASS_SM=0")
ferry_multidev_test(multidev.p2p.smfree.n3 p2p 3 "FERRY_P2P_KERNEL_MAX_BYTES=0")
ferry_multidev_test(multidev.p2p.staged.n2 p2p 2 "FERRY_P2P_STAGE_SENDS=1")
# Every send of one thread's group pushes from its own buffer (stepped launch).
ferry_multidev_test(multidev.p2p.pushes.n3 p2p 3
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_TEST_EXPECT_PUSHES=1")
ferry_multidev_test(multidev.mixed.shm.n3 mixed 3 "NCCL_P2P_DISABLE=1")
# In-place rings over every communicator of the process, every path.
ferry_multidev_test(multidev.inplace.n3 inplace 3)
ferry_multidev_test(multidev.inplace.kernel.n2 inplace 2 "NCCL_PASS_SM=0")
ferry_multidev_test(multidev.inplace.smfree.n4 inplace 4 "FERRY_P2P_KERNEL_MAX_BYTES=0")
# A thread per device, each driving only its own communicator, all at once.
ferry_multidev_test(multidev.threads.n4 threads 4)
ferry_multidev_test(multidev.threads.smfree.n3 threads 3 "FERRY_P2P_KERNEL_MAX_BYTES=0")

# Several processes, each driving several devices (JAX's multi-host
# clients): one group of ncclCommInitRank per process, then the same cases,
# ranks of one process, of other processes and of other hosts in every
# group. Two emulated hosts of one process x 2 devices (HOSTS 2), and two
# processes of one host x 2 devices each (HOSTS 0).
function(ferry_multidev_procs_test name nprocs hosts case ndev devices)
  set(hostArgs "")
  if(hosts GREATER 0)
    set(hostArgs --hosts ${hosts})
  endif()
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nprocs} ${hostArgs} --runtime host --timeout 200
            $<TARGET_FILE:mp_multidev> ${case} ${ndev})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 240 SKIP_RETURN_CODE 77
    ENVIRONMENT "FERRY_HOST_DEVICES=${devices};NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()
foreach(case coll p2p mixed nogroup inplace threads)
  ferry_multidev_procs_test(multidev.hosts.${case}.2x2 2 2 ${case} 2 2)
endforeach()
ferry_multidev_procs_test(multidev.procs.p2p.2x2 2 0 p2p 2 4)
ferry_multidev_procs_test(multidev.procs.inplace.2x2 2 0 inplace 2 4)
