#!/bin/sh
# Runs mpi_client under mpiexec as a test: MPIEXEC PROGRAM RANKS [HOSTS
# [BIND]] starts RANKS ranks; with HOSTS, as that many emulated hosts
# (consecutive ranks share one: NCCL_HOSTID set per group through MPICH's
# MPMD form, `-n k -env VAR value prog : ...`; mpi.cmake runs it with MPICH
# only); BIND "core" binds every rank to one core (Hydra's -bind-to core:
# where there are fewer cores than ranks, ranks share them) and checks that
# each rank saw a single CPU.
# Passes when mpiexec exits 0 and every rank printed its PASS line (a job
# that ran fewer ranks must not pass); timeout(1) bounds it, since mpiexec
# itself would wait on a hung rank.
mpiexec=$1 prog=$2 n=$3 hosts=${4:-1} bind=${5:-none}
per=$((n / hosts))
set -- -n "$n" "$prog"  # one host: the environment as the user left it
if [ "$hosts" -gt 1 ]; then
  set --
  h=0
  while [ $h -lt "$hosts" ]; do
    [ $h -gt 0 ] && set -- "$@" :
    set -- "$@" -n $per -env NCCL_HOSTID "mpi-test-host$h" "$prog"
    h=$((h + 1))
  done
fi
[ "$bind" = core ] && set -- -bind-to core -genv FERRY_TEST_PRINT_CPUS 1 "$@"
out=$(timeout -k 10 200 "$mpiexec" "$@" 2>&1)
rc=$?
echo "$out"
passed=$(echo "$out" | grep -c " of $n: PASS$")
echo "exit $rc, $passed of $n ranks passed"
if [ "$bind" = core ]; then
  # A binding that did not happen would test nothing: every rank must have
  # reported exactly one allowed CPU.
  single=$(echo "$out" | grep -c "allowed CPUs: 1$")
  echo "$single of $n ranks bound to one CPU"
  [ "$single" -eq "$n" ] || exit 1
fi
[ $rc -eq 0 ] && [ "$passed" -eq "$n" ]
