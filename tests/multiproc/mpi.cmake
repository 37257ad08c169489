# An MPI program as users write them (mpi_client.c): mpiexec starts the ranks,
# the unique id travels by MPI_Bcast, no ferry-run. On the host runtime, so CI
# runs it; where no MPI is installed the tests report as skipped (.ci/run
# installs MPICH).
find_package(MPI COMPONENTS C QUIET)
set(ferry_mpi_ranks 2 3 4)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_executable(mpi_client ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/mpi_client.c)
  target_link_libraries(mpi_client PRIVATE MPI::MPI_C nccl)
  target_include_directories(mpi_client PRIVATE ${CMAKE_SOURCE_DIR}/include)
  foreach(n ${ferry_mpi_ranks})
    # Passes when mpiexec exits 0 AND every rank printed its PASS line (a job
    # that ran fewer ranks than asked must not pass); timeout(1) bounds it,
    # since mpiexec itself would wait on a hung rank.
    add_test(NAME mpi.client.n${n}
      COMMAND sh -c "out=$(timeout -k 10 200 \"$0\" ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS} \"$1\" ${MPIEXEC_POSTFLAGS} 2>&1); rc=$?; echo \"$out\"; passed=$(echo \"$out\" | grep -c ' of ${n}: PASS$'); echo \"exit $rc, $passed of ${n} ranks passed\"; [ $rc -eq 0 ] && [ $passed -eq ${n} ]"
              ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_client>)
    set_tests_properties(mpi.client.n${n} PROPERTIES LABELS multiproc TIMEOUT 240
      ENVIRONMENT "FERRY_RUNTIME=host")
  endforeach()
else()
  foreach(n ${ferry_mpi_ranks})
    add_test(NAME mpi.client.n${n} COMMAND sh -c "echo 'no MPI (mpicc, mpiexec): skipped'; exit 77")
    set_tests_properties(mpi.client.n${n} PROPERTIES LABELS multiproc SKIP_RETURN_CODE 77)
  endforeach()
endif()
