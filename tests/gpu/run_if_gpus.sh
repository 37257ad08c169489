#!/usr/bin/env bash
# Runs the command when at least N GPUs are visible; otherwise reports the
# test as skipped (exit 77, ctest SKIP_RETURN_CODE) instead of passing it.
# Usage: run_if_gpus.sh N command args...
need=$1
shift
have=0
if command -v nvidia-smi >/dev/null 2>&1; then
  have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
if [ "$have" -lt "$need" ]; then
  echo "SKIPPED: needs $need GPU(s), found $have"
  exit 77
fi
exec "$@"
