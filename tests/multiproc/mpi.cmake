# An MPI program as users write them (mpi_client.c): mpiexec starts the ranks,
# the unique id travels by MPI_Bcast, no ferry-run. On the host runtime, so CI
# runs it; where no MPI is installed the tests report as skipped (.ci/run
# installs MPICH).
find_package(MPI COMPONENTS C QUIET)
# name:ranks:emulated hosts:binding (two hosts of two ranks: NCCL_HOSTID per
# MPMD group, the network transport under MPI; "core": every rank bound to
# one core, as Open MPI does by default for a few ranks and Slurm with
# --cpu-bind=cores, so Ferry's threads share their rank's one core).
set(ferry_mpi_tests mpi.client.n2:2:1:none mpi.client.n3:3:1:none mpi.client.n4:4:1:none
                    mpi.client.hosts.2x2:4:2:none mpi.client.bound.n4:4:1:core
                    mpi.client.bound.hosts.2x2:4:2:core)
# mpi_run.sh speaks MPICH's mpiexec (Hydra: `-env VAR value`, no root or
# oversubscription checks); Open MPI's mpirun needs other flags, so with it
# the tests report as skipped rather than fail for the launcher's reasons.
set(ferry_mpi_hydra FALSE)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE ferry_mpiexec_version
                  ERROR_QUIET TIMEOUT 20)
  if(ferry_mpiexec_version MATCHES "HYDRA")
    set(ferry_mpi_hydra TRUE)
  endif()
endif()
if(ferry_mpi_hydra)
  add_executable(mpi_client ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/mpi_client.c)
  target_link_libraries(mpi_client PRIVATE MPI::MPI_C nccl)
  target_include_directories(mpi_client PRIVATE ${CMAKE_SOURCE_DIR}/include)
endif()
foreach(entry ${ferry_mpi_tests})
  string(REPLACE ":" ";" fields ${entry})
  list(GET fields 0 name)
  list(GET fields 1 ranks)
  list(GET fields 2 hosts)
  list(GET fields 3 bind)
  if(ferry_mpi_hydra)
    add_test(NAME ${name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/multiproc/mpi_run.sh
             ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:mpi_client> ${ranks} ${hosts} ${bind})
    set_tests_properties(${name} PROPERTIES LABELS multiproc TIMEOUT 240
      ENVIRONMENT "FERRY_RUNTIME=host")
  else()
    add_test(NAME ${name}
      COMMAND sh -c "echo 'no MPICH (mpicc and Hydra mpiexec; found: ${MPIEXEC_EXECUTABLE}): skipped'; exit 77")
    set_tests_properties(${name} PROPERTIES LABELS multiproc SKIP_RETURN_CODE 77)
  endif()
endforeach()
