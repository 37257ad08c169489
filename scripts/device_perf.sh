#!/usr/bin/env bash
# Where a pipelining step's CPU goes, per library, sampled with perf on the
# device machine (which has no perf of its own: NOTES.md trap 88).
#
# Here:    scripts/device_perf.sh kit      # copies this machine's perf, every
#                                          # library it links and its loader
#                                          # into .perfkit/ (git-ignored)
# Device:  run with carry [".perfkit"]:
#          FERRY_TARGETS=nccl OUT=$OUT/p scripts/device_perf.sh run
# Knobs (run): LIBS ("nccl ferry"), SCHEDULE (1F1B), STEPS (timed steps,
# 400: the loop must outlast DELAY + REC_S), DELAY (s after the case
# starts, 3), REC_S (s sampled, 3). Per library: $OUT/perf-<lib>.txt (the
# ranks' main threads by library and by symbol, every thread by name) and
# the run's log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
kit=$src/.perfkit

make_kit() {
  local perf
  perf=$(command -v perf) || { echo "no perf here (apt-get install linux-perf)"; exit 1; }
  rm -rf "$kit" && mkdir -p "$kit"
  cp "$perf" "$kit/perf"
  for l in $(ldd "$perf" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do cp -L "$l" "$kit/"; done
  "$kit"/ld-linux-x86-64.so.2 --library-path "$kit" "$kit/perf" --version
  du -sh "$kit"
}

run() {
  local P="$kit/ld-linux-x86-64.so.2 --library-path $kit $kit/perf"
  local out=${OUT:-$PWD/device-out}
  mkdir -p "$out"
  $P --version
  "$here/device_p2p.sh" "$src" build >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
  export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 CLIENT_TIME_STEPS=${STEPS:-400}
  local sched=${SCHEDULE:-1F1B}
  for lib in ${LIBS:-nccl ferry}; do
    local pre="" log=$out/run-$lib.log
    [ "$lib" = ferry ] && pre="LD_PRELOAD=/tmp/fb/libnccl.so.2"
    env $pre python3 -m torch.distributed.run --nproc-per-node 2 "$here/real_clients/clients.py" \
      --tag "$lib-perf" --expect "$lib" --cases pipe --schedules "$sched" >"$log" 2>&1 &
    local tr=$!
    for _ in $(seq 1 240); do grep -q "CASE pipe.$sched start" "$log" && break; sleep 0.25; done
    sleep "${DELAY:-3}"
    local pids
    pids=$(for p in $(pgrep -f "clients.py --tag $lib-perf"); do
      tr '\0' ' ' <"/proc/$p/cmdline" | grep -q torch.distributed.run || echo "$p"; done | paste -sd,)
    echo "$lib: ranks $pids"
    $P record -e cpu-clock -F 4999 -p "$pids" -o "/tmp/perf-$lib.data" -- sleep "${REC_S:-3}" \
      >"$out/rec-$lib.txt" 2>&1
    wait $tr
    grep -o "\"case\": \"pipe.$sched[^}]*" "$log" | cut -c1-200
    {
      echo "### main threads ($pids) by library"
      $P report -i "/tmp/perf-$lib.data" --tid "$pids" --sort dso --stdio 2>/dev/null | grep -v '^#' | grep . | head -25
      echo "### main threads by symbol"
      $P report -i "/tmp/perf-$lib.data" --tid "$pids" --sort dso,sym --stdio 2>/dev/null | grep -v '^#' | grep . | head -70
      echo "### every thread by name and library"
      $P report -i "/tmp/perf-$lib.data" --sort comm,dso --stdio 2>/dev/null | grep -v '^#' | grep . | head -25
    } >"$out/perf-$lib.txt"
    head -40 "$out/perf-$lib.txt"
  done
}

case ${1:-} in
kit) make_kit ;;
run) run ;;
*) sed -n 2,14p "$0"; exit 2 ;;
esac
