#!/usr/bin/env bash
# Runs a ferry-bench command and checks its outcome, so a smoke test fails on
# a crash, a hang (ctest TIMEOUT), a data error or a missing table.
# Usage: bench_expect.sh EXIT_CODE 'REGEX' [--not 'REGEX'] -- command args...
#   EXIT_CODE: the exit status required; REGEX must match some output line;
#   --not REGEX must match none (e.g. a non-zero #wrong column).
set -u
want=$1
pattern=$2
shift 2
forbid=""
if [ "${1:-}" = "--not" ]; then
  forbid=$2
  shift 2
fi
[ "${1:-}" = "--" ] && shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$want" ]; then
  echo "bench_expect: exit status $rc, wanted $want"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
  echo "bench_expect: no output line matches: $pattern"
  exit 1
fi
if [ -n "$forbid" ] && printf '%s\n' "$out" | grep -Eq -- "$forbid"; then
  echo "bench_expect: an output line matches the forbidden: $forbid"
  exit 1
fi
exit 0
