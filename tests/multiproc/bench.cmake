# ferry-bench: unit tests of its pure parts join ferry_unit_tests; the tests
# below run the tool itself (label multiproc), all on the host runtime.
target_link_libraries(ferry_unit_tests PRIVATE ferry_bench_pure)

set(FERRY_BENCH_EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/bench_expect.sh)

# bench_expect.sh checks the exit status, a line that must appear, and lines
# that must not ("#wrong total 0" is rank 0's sum; other ranks exit 1 on any
# wrong element, which ferry-run turns into a failure).
function(ferry_bench_test name code pattern forbid)
  add_test(NAME ${name} COMMAND ${FERRY_BENCH_EXPECT} ${code} ${pattern} --not ${forbid} -- ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 60
                                          ENVIRONMENT FERRY_RUNTIME=host)
endfunction()

# 1. Every op through Ferry's library, 2 ranks under ferry-run: a short sweep
#    that must finish with #wrong 0 (today: "not supported" for every op).
foreach(op all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter)
  ferry_bench_test(bench.smoke.${op} 0 "#wrong total 0$" "FAILED|wrong elements"
    $<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 50
    $<TARGET_FILE:ferry-bench> ${op} -b 8 -e 64K -f 4 -w 1 -n 3 --lib $<TARGET_FILE:nccl>)
endforeach()

# --window: ncclMemAlloc buffers registered as symmetric windows (send and
# receive in one group, as nccl-tests -R 2); all-gathers and broadcasts
# above FERRY_WIN_COLL_MIN_BYTES copy straight into the peers' windows.
ferry_bench_test(bench.window.n3 0 "#wrong total 0$" "FAILED|wrong elements|failed"
  $<TARGET_FILE:ferry-run> -n 3 --runtime host --timeout 50
  $<TARGET_FILE:ferry-bench> all_gather,broadcast,all_reduce,sendrecv -b 1K -e 1M -f 32 -w 1 -n 2
  --window --lib $<TARGET_FILE:nccl>)
set_tests_properties(bench.window.n3 PROPERTIES ENVIRONMENT "FERRY_RUNTIME=host;FERRY_WIN_COLL_MIN_BYTES=32768;FERRY_WIN_COLL_OPS=broadcast,allgather")

# --compare under ferry-run: two children per rank, rendezvous on the
# launcher's port, fresh bootstrap ports per library.
ferry_bench_test(bench.compare.ferry.n2 0 "# comparison: A = " "FAILED|wrong elements"
  $<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 50
  $<TARGET_FILE:ferry-bench> all_reduce,sendrecv -b 64 -e 4K -f 8 -w 1 -n 2
  --lib $<TARGET_FILE:nccl> --compare $<TARGET_FILE:ferry>)
# --rounds: the libraries in turn, three times each, rows their median round.
ferry_bench_test(bench.compare.rounds.n2 0 "# 3 rounds, the libraries in turn.*A: 3 rounds with results, B: 3"
  "FAILED|wrong elements"
  $<TARGET_FILE:ferry-run> -n 2 --runtime host --timeout 50
  $<TARGET_FILE:ferry-bench> sendrecv -b 64 -e 4K -f 8 -w 1 -n 2 --rounds 3
  --lib $<TARGET_FILE:nccl> --compare $<TARGET_FILE:ferry>)

# 2. A test double of libnccl (one process, -g N emulated devices, ops run at
#    ncclGroupEnd) that really moves and reduces data, so the tool's layouts,
#    counts, grouping and checks run end to end before Ferry's ops land.
foreach(variant full p2p)
  add_library(bench_fake_nccl_${variant} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/bench_fake_nccl.cc)
  target_link_libraries(bench_fake_nccl_${variant} PRIVATE ferry_bench_pure)
  target_compile_options(bench_fake_nccl_${variant} PRIVATE ${FERRY_WARNINGS})
endforeach()
target_compile_definitions(bench_fake_nccl_full PRIVATE FAKE_NEW_COLLS=1)
set(FAKE $<TARGET_FILE:bench_fake_nccl_full>)
set(FAKE_P2P $<TARGET_FILE:bench_fake_nccl_p2p>)
set(BENCH $<TARGET_FILE:ferry-bench>)
set(OK_ROWS "#wrong total 0$")
set(NO_ERRORS "not supported|FAILED|wrong elements")

ferry_bench_test(bench.fake.g4.float.sum 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all -g 4 -b 8 -e 256K -f 8 -w 1 -n 2 --lib ${FAKE})
ferry_bench_test(bench.fake.g3.half.avg 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all -g 3 -d half -o avg -r 2 -b 6 -e 96K -f 16 -w 0 -n 1 --lib ${FAKE})
ferry_bench_test(bench.fake.g4.fp8e4m3.prod 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all_reduce,reduce_scatter,reduce -g 4 -d fp8e4m3 -o prod -r 1 -b 4 -e 16K -f 4 -n 1 --lib ${FAKE})
ferry_bench_test(bench.fake.g2.int8.max 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all -g 2 -d int8 -o max -r 1 -b 2 -e 8K -f 8 -n 1 --lib ${FAKE})
ferry_bench_test(bench.fake.g3.bf16.min 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all_reduce,reduce_scatter,reduce -g 3 -d bfloat16 -o min -b 6 -e 24K -f 4 -n 1 --lib ${FAKE})
ferry_bench_test(bench.fake.g2.uint64.avg 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all -g 2 -d uint64 -o avg -b 16 -e 32K -f 8 -n 1 --inplace only --lib ${FAKE})
ferry_bench_test(bench.fake.g4.fp8e5m2.sum 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} all -g 4 -d fp8e5m2 -b 4 -e 4K -f 4 -n 1 --inplace no --lib ${FAKE})
# Without ncclAlltoAll/Gather/Scatter: grouped send/recv fallbacks.
ferry_bench_test(bench.fake.g3.p2p 0 ${OK_ROWS} ${NO_ERRORS}
  ${BENCH} alltoall,gather,scatter,sendrecv -g 3 -d int32 -r 1 -b 12 -e 48K -f 4 -n 1 --lib ${FAKE_P2P})
# A library that corrupts one element per op must be caught: exit 1.
ferry_bench_test(bench.fake.corrupt.detected 1 "wrong elements" "#wrong total 0$"
  ${BENCH} all -g 2 -b 64 -e 1K -f 4 -n 1 --lib ${FAKE})
set_property(TEST bench.fake.corrupt.detected APPEND PROPERTY ENVIRONMENT FAKE_NCCL_CORRUPT=1)
# --compare in one process (children use ncclCommInitAll), with --json.
ferry_bench_test(bench.fake.compare.g2 0 "# comparison: A = " "FAILED|wrong elements"
  ${BENCH} all -g 2 -b 64 -e 64K -f 32 -n 1 --lib ${FAKE} --compare ${FAKE_P2P}
  --json ${CMAKE_CURRENT_BINARY_DIR}/bench_fake_compare.json)
# Setup errors: exit 2 with a reason.
ferry_bench_test(bench.errors.nolib 2 "dlopen" "#wrong total"
  ${BENCH} all_reduce --lib /nonexistent/libnccl.so.2)
ferry_bench_test(bench.errors.usage 2 "unknown op" "#wrong total" ${BENCH} allreduce)
