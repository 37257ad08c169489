# NCCL 2.28's recovery and planning calls (ncclCommShrink, ncclCommRevoke,
# ncclCommInitRankScalable, ncclGroupSimulateEnd) across real processes.
add_executable(mp_recovery ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/recovery_cases.cc)
target_include_directories(mp_recovery PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_recovery PRIVATE nccl ferry_test_buffers)

function(ferry_recovery_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 200
            $<TARGET_FILE:mp_recovery> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 240 ${ARGN})
endfunction()

foreach(n 2 5)
  ferry_recovery_test(api.scalable.n${n} ${n} scalable)
endforeach()
foreach(n 3 4)
  ferry_recovery_test(api.shrink.n${n} ${n} shrink)
endforeach()
ferry_recovery_test(api.revoke.n2 2 revoke)
ferry_recovery_test(api.revoke.n3 3 revoke)
ferry_recovery_test(api.simulate.n2 2 simulate)
# Shrink's two-rank form (the abort variant drops rank 0 alone), as on 2 GPUs.
ferry_recovery_test(api.shrink.n2 2 shrink)
# The message revoke stops is SM-free (its connection fails with
# ncclRemoteError): the revoked communicator still reads ncclSuccess once
# quiescent, as NCCL says, so split and shrink proceed (session 46).
ferry_recovery_test(api.revoke.smfree.n3 3 revoke ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
ferry_recovery_test(api.shrink.smfree.n4 4 shrink ENVIRONMENT FERRY_P2P_KERNEL_MAX_BYTES=0)
# Across two emulated hosts of two ranks: the peers' revokes close their
# network connections too.
function(ferry_recovery_hosts_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --hosts 2 --runtime host --timeout 200
            $<TARGET_FILE:mp_recovery> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 240
    ENVIRONMENT "NCCL_SOCKET_IFNAME=lo")
endfunction()
ferry_recovery_hosts_test(api.revoke.hosts.2x2 4 revoke)
ferry_recovery_hosts_test(api.shrink.hosts.2x2 4 shrink)
ferry_recovery_hosts_test(api.scalable.hosts.2x2 4 scalable)
