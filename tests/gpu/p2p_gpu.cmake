# SM-free point-to-point on 2 GPUs: the host-runtime suite on CUDA, a >4 GiB
# message, and the lazy-loading scenario. Skipped without 2 GPUs.
function(ferry_gpu_p2p_test name case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 280 $<TARGET_FILE:mp_p2p> ${case})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77 ${ARGN})
endfunction()
foreach(case alltoall dtypes unbatched mixes abort large stress many)
  ferry_gpu_p2p_test(gpu.p2p.${case} ${case})
endforeach()
ferry_gpu_p2p_test(gpu.p2p.mixes.shm mixes ENVIRONMENT NCCL_P2P_DISABLE=1)
ferry_gpu_p2p_test(gpu.p2p.alltoall.eager alltoall ENVIRONMENT "CUDA_MODULE_LOADING=EAGER")
foreach(case alltoall unbatched mixes stress large)
  ferry_gpu_p2p_test(gpu.p2p.${case}.kernel ${case} ENVIRONMENT NCCL_PASS_SM=0)
endforeach()
# Self pairs copied directly (staged sends under lazy loading, not staged
# when eager), and through the proxy; all SM-free.
ferry_gpu_p2p_test(gpu.p2p.self self ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_gpu_p2p_test(gpu.p2p.self.eager self)
set_tests_properties(gpu.p2p.self.eager PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;CUDA_MODULE_LOADING=EAGER")
foreach(mode after:2 pieces:3)
  string(REPLACE ":" ";" mv ${mode})
  list(GET mv 0 m)
  list(GET mv 1 v)
  foreach(case self alltoall)
    ferry_gpu_p2p_test(gpu.p2p.${case}.self${m} ${case})
    set_tests_properties(gpu.p2p.${case}.self${m} PROPERTIES
      ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY=${v}")
  endforeach()
endforeach()
# FERRY_P2P_SELF_COPY_ROWS: strided self copies (the default, rows of 4 KiB;
# the all-to-all's blocks are 48 KiB: rows of 112 bytes, a tail left over)
# and one plain copy (0).
ferry_gpu_p2p_test(gpu.p2p.self.selfplain self)
set_tests_properties(gpu.p2p.self.selfplain PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY_ROWS=0")
ferry_gpu_p2p_test(gpu.p2p.alltoall.selfrows alltoall)
set_tests_properties(gpu.p2p.alltoall.selfrows PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_SELF_COPY_ROWS=112")
ferry_gpu_p2p_test(gpu.p2p.self.noselfcopy self)
set_tests_properties(gpu.p2p.self.noselfcopy PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;CUDA_MODULE_LOADING=EAGER;FERRY_P2P_SELF_COPY=0")

if(FERRY_CUDA)
  add_executable(gpu_p2p_lazy ${CMAKE_CURRENT_SOURCE_DIR}/gpu/p2p_lazy.cu)
  target_link_libraries(gpu_p2p_lazy PRIVATE nccl CUDA::cudart)
  # auto is memop (zero-SM stream waits); kernel keeps the spin kernel
  # covered, and with one device connection auto falls back to it (trap 16).
  # Each test also fails if the init's INFO line names the other wait.
  set(memop_line "user streams wait with stream memory operations")
  set(spin_line "user streams wait with a one-thread spin kernel")
  foreach(variant "LAZY;auto;;${spin_line}" "EAGER;auto;;${spin_line}"
                  "LAZY;kernel;;${memop_line}" "EAGER;kernel;;${memop_line}"
                  "LAZY;auto;oneconn;${memop_line}")
    list(GET variant 0 loading)
    list(GET variant 1 wait)
    list(GET variant 2 suffix)
    list(GET variant 3 wrong_line)
    set(name gpu.p2p.lazy_loading.${loading}.${wait})
    set(env "CUDA_MODULE_LOADING=${loading};FERRY_USER_WAIT=${wait}")
    list(APPEND env "NCCL_DEBUG=INFO" "NCCL_DEBUG_SUBSYS=INIT")
    if(suffix STREQUAL "oneconn")
      set(name ${name}.oneconn)
      list(APPEND env "CUDA_DEVICE_MAX_CONNECTIONS=1")
    endif()
    add_test(NAME ${name}
      COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
              $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 120 $<TARGET_FILE:gpu_p2p_lazy>)
    set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 150 SKIP_RETURN_CODE 77
      ENVIRONMENT "${env}" FAIL_REGULAR_EXPRESSION "${wrong_line}")
  endforeach()
endif()
# SM-free p2p at every size (small messages default to kernel p2p).
ferry_gpu_p2p_test(gpu.p2p.alltoall.smfree alltoall ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_gpu_p2p_test(gpu.p2p.stress.smfree stress ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
# Staged sends whose receive lands in the send buffer itself (not yet run on
# a GPU when written: session 4 had no device time left).
ferry_gpu_p2p_test(gpu.p2p.swap.staged swap)
set_tests_properties(gpu.p2p.swap.staged PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0")
# In-place exchanges on every path (kernel p2p stages such sends first).
ferry_gpu_p2p_test(gpu.p2p.inplace inplace)
ferry_gpu_p2p_test(gpu.p2p.inplace.kernel inplace ENVIRONMENT NCCL_PASS_SM=0)
ferry_gpu_p2p_test(gpu.p2p.inplacemix inplacemix)
# Eager loading: no staging by default, so the SM-free path must stage
# in-place sends by itself (it did not before session 25).
ferry_gpu_p2p_test(gpu.p2p.inplace.eager inplace)
set_tests_properties(gpu.p2p.inplace.eager PROPERTIES ENVIRONMENT
  "CUDA_MODULE_LOADING=EAGER;FERRY_P2P_KERNEL_MAX_BYTES=0")
# A staged send's buffer overwritten on its stream right away; the stress mix
# staged and all SM-free.
ferry_gpu_p2p_test(gpu.p2p.overwrite.staged overwrite ENVIRONMENT FERRY_P2P_STAGE_SENDS=1)
ferry_gpu_p2p_test(gpu.p2p.stress.staged stress)
set_tests_properties(gpu.p2p.stress.staged PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0")
# Kernel p2p lanes with a 1 KiB lane unit: one pair's messages use 1-4 lanes
# in one group.
ferry_gpu_p2p_test(gpu.p2p.many.lanes many)
set_tests_properties(gpu.p2p.many.lanes PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_LANE_BYTES=1K")
# Every kernel-p2p message of the stress case over LL, cut into 1-8 LL lane
# parts (FERRY_P2P_LL_LANE_BYTES=1K).
ferry_gpu_p2p_test(gpu.p2p.stress.ll stress)
set_tests_properties(gpu.p2p.stress.ll PROPERTIES
  ENVIRONMENT "FERRY_P2P_LL_MAX_BYTES=64K;FERRY_P2P_LL_LANE_BYTES=1K")
# The staging cap on 2 GPUs (staged sends, as under lazy loading).
ferry_gpu_p2p_test(gpu.p2p.stagingcap stagingcap)
set_tests_properties(gpu.p2p.stagingcap PROPERTIES ENVIRONMENT
  "FERRY_P2P_STAGE_SENDS=1;FERRY_P2P_KERNEL_MAX_BYTES=0;FERRY_P2P_STAGING_MAX_BYTES=8388608;FERRY_P2P_STAGING_WAIT_MS=10000")
# A new user stream for every exchange, past the 64 fences the engine
# remembers (p2p_streams.cc), SM-free at every size, lazy and eager.
ferry_gpu_p2p_test(gpu.p2p.newstreams newstreams ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_gpu_p2p_test(gpu.p2p.newstreams.eager newstreams)
set_tests_properties(gpu.p2p.newstreams.eager PROPERTIES
  ENVIRONMENT "FERRY_P2P_KERNEL_MAX_BYTES=0;CUDA_MODULE_LOADING=EAGER")
# The SM-free network path on 2 GPUs: each rank its own emulated host
# (FERRY_TEST_RANKS_PER_HOST=1 sets NCCL_HOSTID), loopback sockets; written
# in session 26, not yet run on a GPU.
function(ferry_gpu_net_p2p_test name case)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
            $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 280 $<TARGET_FILE:mp_p2p> ${case})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "FERRY_TEST_RANKS_PER_HOST=1;NCCL_SOCKET_IFNAME=lo;${ARGN}")
endfunction()
ferry_gpu_net_p2p_test(gpu.p2p.net.alltoall alltoall)
ferry_gpu_net_p2p_test(gpu.p2p.net.mixes mixes)
ferry_gpu_net_p2p_test(gpu.p2p.net.inplace inplace FERRY_P2P_KERNEL_MAX_BYTES=0)
# Two emulated hosts of two ranks (one GPU each on either host): an in-place
# ring whose same-host send shares bytes with a receive from the other host
# (the multi-node in-place sendrecv; wrong until session 46, p2p_net.cc's
# copyAheadOfNet).
add_test(NAME gpu.p2p.net.inplace.2x2
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
          $<TARGET_FILE:ferry-run> -n 4 --runtime cuda --timeout 280 $<TARGET_FILE:mp_p2p> inplace)
set_tests_properties(gpu.p2p.net.inplace.2x2 PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "FERRY_TEST_RANKS_PER_HOST=2;NCCL_SOCKET_IFNAME=lo")
