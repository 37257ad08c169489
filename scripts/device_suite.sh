#!/usr/bin/env bash
# Builds Ferry with CUDA on a GPU machine and runs the GPU suite plus the
# side-by-side init timing against NVIDIA's NCCL (torch's wheel). Results and
# logs go to $OUT (or ./device-out). Usage: scripts/device_suite.sh [SRC_DIR]
set -uo pipefail
src=${1:-.}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
gtest=$(cd "$src" && pwd)/../.deps/googletest
[ -d "$gtest" ] || gtest=$PWD/.deps/googletest
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee "$out/gpus.txt"
cmake -S "$src" -B /tmp/fb -G Ninja -DFERRY_CUDA=ON -DFERRY_GTEST_SRC="$gtest" >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
ninja -C /tmp/fb -j 16 >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "build ok"
(cd /tmp/fb && ctest -L gpu --output-on-failure -j 1 2>&1 | tee "$out/ctest-gpu.log" | tail -25)
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib", "libnccl.so.2"))' 2>/dev/null)
echo "nvidia nccl: $nccl"
for lib in /tmp/fb/libnccl.so.2 "$nccl"; do
  for i in 1 2 3; do
    /tmp/fb/tools/ferry-run/ferry-run -n 2 --runtime cuda --timeout 120 \
      /tmp/fb/bench/ferry-init-time --lib "$lib" 2>&1 | grep "rank 0/" | tee -a "$out/init-time.txt"
  done
done
