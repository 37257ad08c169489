# ferry-bench --overlap on 2 GPUs (CUDA builds only; skipped without 2 GPUs):
# the GEMM train, the traffic launched in its middle and the worst-rank
# fold run end to end, with traffic (alltoall and sendrecv through Ferry,
# data checked) and as the control that launches nothing. The slowdowns
# themselves are benchmarks (bench/RESULTS.md), not asserted here. (The
# gpu fragments are included before multiproc's: name bench_expect.sh here.)
if(FERRY_CUDA)
  foreach(how overlap overlap-nothing)
    add_test(NAME gpu.bench.${how}
      COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_if_gpus.sh 2
              ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/bench_expect.sh 0 "GEMM slowdown by rank .* x[0-9.]+ x[0-9.]+$"
              --not "FAILED|wrong elements|did not cover|failed" --
              $<TARGET_FILE:ferry-run> -n 2 --runtime cuda --timeout 110
              $<TARGET_FILE:ferry-bench> alltoall,sendrecv -b 64M -e 64M -w 1 -n 10
              --lib $<TARGET_FILE:nccl> --${how})
    set_tests_properties(gpu.bench.${how} PROPERTIES LABELS gpu TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endif()
