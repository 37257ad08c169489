# Network connections at init across hosts that NCCL_HOSTID emulates on one
# machine (net_cases.cc): 2 and 4 "hosts" of 2 ranks on the built-in Socket
# engine, a bogus NCCL_NET, and the test net plugin (tests/net/net.cmake).
add_executable(mp_net ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/net_cases.cc
                      ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/p2p_util.cc)
target_include_directories(mp_net PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_link_libraries(mp_net PRIVATE ferry_test_buffers ${CMAKE_DL_LIBS})
# The plugin is loaded by path at run time, never linked.
target_compile_definitions(mp_net PRIVATE
  FERRY_TEST_NET_PLUGIN_V11="$<TARGET_FILE:ferry_test_net_plugin_v11>")
add_dependencies(mp_net ferry_test_net_plugin_v11)

# Bounded twice: FERRY_BOOTSTRAP_TIMEOUT (init's connection loop gives up)
# and ferry-run's --timeout (every rank killed).
function(ferry_net_test name nranks case)
  add_test(NAME ${name}
    COMMAND $<TARGET_FILE:ferry-run> -n ${nranks} --runtime host --timeout 60
            $<TARGET_FILE:mp_net> ${case})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 90
    ENVIRONMENT "FERRY_BOOTSTRAP_TIMEOUT=30;${ARGN}")
endfunction()

ferry_net_test(net.connect.2x2 4 connect)
ferry_net_test(net.initdestroy.4x2 8 initdestroy)
ferry_net_test(net.bogus.2x2 4 bogus)
ferry_net_test(net.plugin.2x2 4 plugin)
