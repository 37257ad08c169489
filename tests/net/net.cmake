# The test net plugin (tests/net/test_net_plugin.cc), built as the two
# libraries NCCL_NET_PLUGIN can name: one exporting only ncclNetPlugin_v11,
# one exporting only ncclNetPlugin_v6. Header-only use of Ferry (the ABI
# structs); nothing of ferry_core is linked in, as with a real plugin.
foreach(variant IN ITEMS "ferrytest;11" "ferrytest6;6")
  list(GET variant 0 suffix)
  list(GET variant 1 version)
  set(target ferry_test_net_plugin_v${version})
  add_library(${target} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/net/test_net_plugin.cc)
  target_include_directories(${target} BEFORE PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(${target} PRIVATE FERRY_TEST_NET_VERSION=${version}
                             FERRY_NO_CUDA_HEADERS=1)
  target_compile_options(${target} PRIVATE ${FERRY_WARNINGS} -fvisibility=hidden)
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME nccl-net-${suffix})
  add_dependencies(ferry_unit_tests ${target})
endforeach()

# tests/unit/net_plugin_test.cc loads them by path.
target_compile_definitions(ferry_unit_tests PRIVATE
  FERRY_TEST_NET_PLUGIN_V11="$<TARGET_FILE:ferry_test_net_plugin_v11>"
  FERRY_TEST_NET_PLUGIN_V6="$<TARGET_FILE:ferry_test_net_plugin_v6>")
