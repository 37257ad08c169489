#!/usr/bin/env bash
# One call on a 2-GPU device machine when little device time is left: the
# build, the real-client suite beside NVIDIA's NCCL, nccl-tests -g 2 and the
# GPU suite, in that order, each started only while the deadline allows, so
# that the logs come back even when the call runs out. The logs are tarred
# into $OUT/logs.tgz every 10 s (the device returns at most a few files).
# Usage: scripts/device_2gpu.sh   (knobs: DEADLINE_S, default 430; STAGES,
#   default "clients nccltests gpu", any of those, p2pdiag (the FERRY_PROFILE
#   and push-wait runs of real_clients.sh), death (real_clients.sh's) and
#   memory, inittime, wincoll, ntmpi (nccl-tests under mpiexec, one GPU per
#   rank; carry .mpikit, made by scripts/mpi_kit.sh) or any other device_p2p.sh stage (copyov,
#   cesplit, ...), in the order given; clients2 is a second clients stage
#   with CLIENT_MODES2, CLIENT_CASES2 (default pipe) and CLIENT_SCHEDULES2;
#   GPU_REGEX limits the gpu stage to the GPU tests it matches (ctest -R);
#   NT_BUILD=0 skips the nccl-tests build that otherwise runs beside the
#   first stages (for calls whose timings matter and have no nccltests);
#   the real_clients.sh knobs CLIENT_MODES, CLIENT_CASES, DIAG_*, NT_ARGS, NT_TIMEOUT)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
deadline=$(($(date +%s) + ${DEADLINE_S:-430}))
final=${OUT:-$PWD/device-out}
o=/tmp/device-logs
mkdir -p "$o" "$final"
export OUT=$o
snapshot() { tar czf "$final/logs.tgz.tmp" -C "$(dirname $o)" "$(basename $o)" && mv "$final/logs.tgz.tmp" "$final/logs.tgz"; }
(while sleep 10; do snapshot; done) &
ticker=$!
left() { echo $((deadline - $(date +%s))); }
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m; } >"$o/machine.txt" 2>&1
head -3 "$o/machine.txt"

"$here/device_p2p.sh" "$src" build || { kill $ticker; snapshot; exit 1; }
echo "built, $(left) s left"
# nccl-tests builds beside the first stages (make -j 32: it perturbs timings
# taken meanwhile); NT_BUILD=0 leaves it out where no nccltests stage follows.
ntb=
if [ "${NT_BUILD:-1}" != 0 ]; then
  "$here/real_clients.sh" /tmp/fb ntbuild >"$o/ntbuild.txt" 2>&1 &
  ntb=$!
fi

export CLIENT_MODES=${CLIENT_MODES:-nccl-lazy ferry-lazy}
export CLIENT_CASES=${CLIENT_CASES:-pipe,fsdp2,ddp,a2a,batch,blocking,overlap,graph,graphp2p,torchapi,mesh,groups,p2pgroups,shrink}
# 180 s a mode: NVIDIA's NCCL needs ~150 s for the whole default case list
# (its groups cases spend 16-28 s in setup); at 120 its shrink cell went
# missing in every full run (sessions 32 and 35), a failing cell that is
# nobody's bug. Ferry's run of the same list takes ~40 s.
export CLIENT_TIMEOUT=${CLIENT_TIMEOUT:-180} CLIENT_CASE_TIMEOUT=${CLIENT_CASE_TIMEOUT:-60}
for st in ${STAGES:-clients nccltests gpu}; do
  echo "=== $st, $(left) s left"
  case $st in
  clients) [ "$(left)" -gt 60 ] && timeout $(($(left) - 20)) "$here/real_clients.sh" /tmp/fb torch ;;
  clients2)
    [ "$(left)" -gt 60 ] && CLIENT_MODES=$CLIENT_MODES2 CLIENT_CASES=${CLIENT_CASES2:-pipe} \
      CLIENT_SCHEDULES=${CLIENT_SCHEDULES2:-${CLIENT_SCHEDULES:-}} \
      timeout $(($(left) - 20)) "$here/real_clients.sh" /tmp/fb torch
    ;;
  p2pdiag) [ "$(left)" -gt 60 ] && timeout $(($(left) - 20)) "$here/real_clients.sh" /tmp/fb p2pdiag ;;
  death) [ "$(left)" -gt 60 ] && DEATH_TIMEOUT=$(($(left) / 2 - 15)) "$here/real_clients.sh" /tmp/fb death ;;
  memory) [ "$(left)" -gt 60 ] && OUT=$o/$st timeout $(($(left) - 20)) "$here/device_p2p.sh" "$src" memory | tail -40 ;;
  inittime) [ "$(left)" -gt 40 ] && OUT=$o/$st timeout $(($(left) - 20)) "$here/device_p2p.sh" "$src" inittime | tail -10 ;;
  wincoll) [ "$(left)" -gt 60 ] && OUT=$o/$st timeout $(($(left) - 20)) "$here/device_p2p.sh" "$src" wincoll | tail -70 ;;
  nccltests)
    [ -n "$ntb" ] && wait $ntb
    if [ "$(left)" -gt 60 ]; then
      NT_ARGS=${NT_ARGS:--b 8 -e 1G -f 32 -g 2 -c 1 -n 3 -w 1} NT_TIMEOUT=${NT_TIMEOUT:-20} \
        timeout $(($(left) - 30)) "$here/real_clients.sh" /tmp/fb nccltests
    fi
    ;;
  ntmpi)  # nccl-tests under mpiexec, one GPU per rank (carry .mpikit: scripts/mpi_kit.sh)
    [ -n "$ntb" ] && wait $ntb
    [ "$(left)" -gt 90 ] && NT_TIMEOUT=${NT_TIMEOUT:-30} timeout $(($(left) - 30)) \
      "$here/real_clients.sh" /tmp/fb ntmpi
    ;;
  gpu)
    if [ "$(left)" -gt 40 ]; then
      (cd /tmp/fb && timeout $(($(left) - 15)) ctest -L gpu ${GPU_REGEX:+-R "$GPU_REGEX"} --timeout 60 --output-on-failure >"$o/ctest-gpu.log" 2>&1)
      grep -E "tests passed|Failed|\*\*\*|Not Run" "$o/ctest-gpu.log" | head -30
    fi
    ;;
  *) # any other stage of device_p2p.sh (copyov, cesplit, bench, overlap, ...), its logs in a
    # folder of their own: device_p2p.sh folds its OUT into one archive at its end, which
    # would take the client logs from the summary (session 45)
    [ "$(left)" -gt 60 ] && OUT=$o/$st timeout $(($(left) - 20)) "$here/device_p2p.sh" "$src" "$st" | tail -70 ;;
  esac
done
"$here/real_clients.sh" /tmp/fb summary
kill $ticker
snapshot
