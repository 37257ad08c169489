# ferry-run: unit tests of its pure parts (args, per-rank environment) join
# ferry_unit_tests; the end-to-end suite starts real ranks under the launcher.
target_link_libraries(ferry_unit_tests PRIVATE ferry_run_args)

add_executable(launcher_rank ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launcher_rank.cc)
target_link_libraries(launcher_rank PRIVATE ferry_test_common)
target_include_directories(launcher_rank PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)

add_executable(launcher_test ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/launcher_test.cc)
target_link_libraries(launcher_test PRIVATE ferry_test_common GTest::gtest_main)
target_include_directories(launcher_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc)
target_compile_definitions(launcher_test PRIVATE FERRY_RUN_PATH="$<TARGET_FILE:ferry-run>"
                                                 LAUNCHER_RANK_PATH="$<TARGET_FILE:launcher_rank>")
add_dependencies(launcher_test ferry-run launcher_rank)
gtest_discover_tests(launcher_test DISCOVERY_TIMEOUT 60
                     PROPERTIES LABELS multiproc TIMEOUT 120)
