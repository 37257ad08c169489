#!/usr/bin/env bash
# An MPICH kit for the device machine, which has no MPI: nccl-tests built with
# MPI=1 runs one GPU per process under mpiexec, the way clusters run it (the
# real-client suite's `ntmpi` stage). Made here from Debian's mpich packages
# into the git-ignored .mpikit/ and carried to the device (run's `carry`):
#   bin/      mpiexec (Hydra) and hydra_pmi_proxy
#   lib/      libmpich.so.12 (also as libmpi.so, what nccl-tests links) and
#             every library ldd lists for them except glibc's own
#   lib/ucx/  the UCX shared-memory module (UCX_MODULE_DIR)
#   include/  mpi.h and the headers it includes
# Usage: scripts/mpi_kit.sh [DIR]   (default .mpikit in the repository root;
#   installs mpich and libmpich-dev with apt-get when they are missing).
# Use it with PATH=DIR/bin:$PATH LD_LIBRARY_PATH=DIR/lib UCX_MODULE_DIR=DIR/lib/ucx.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kit=${1:-$here/../.mpikit}
arch=/usr/lib/x86_64-linux-gnu
if [ ! -x /usr/bin/mpiexec.hydra ] || [ ! -e $arch/libmpich.so.12 ]; then
  apt-get update -qq && apt-get install -y -qq mpich libmpich-dev >/dev/null
fi
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib/ucx" "$kit/include"
cp /usr/bin/mpiexec.hydra "$kit/bin/mpiexec"
cp /usr/bin/hydra_pmi_proxy "$kit/bin/"
cp -L $arch/libmpich.so.12 "$kit/lib/"
ln -s libmpich.so.12 "$kit/lib/libmpi.so"
ln -s libmpich.so.12 "$kit/lib/libmpich.so"
cp -L $arch/ucx/libuct_cma.so.0 "$kit/lib/ucx/"
ln -s libuct_cma.so.0 "$kit/lib/ucx/libuct_cma.so"
cp /usr/include/x86_64-linux-gnu/mpich/*.h "$kit/include/"
# The closure of their libraries, leaving glibc's to the device (its
# programs and CUDA use the device's own).
for f in "$kit/bin/"* "$kit/lib/libmpich.so.12" "$kit/lib/ucx/libuct_cma.so.0"; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv)\.so|/ld-linux' |
  while read -r lib; do cp -nL "$lib" "$kit/lib/"; done
# Every library must now resolve inside the kit or to glibc.
missing=$(for f in "$kit/bin/"* "$kit/lib/"*.so*; do
  LD_LIBRARY_PATH="$kit/lib" ldd "$f" | grep "not found" || true
done)
[ -z "$missing" ] || { echo "mpi_kit: unresolved libraries:"; echo "$missing"; exit 1; }
echo "mpi_kit: $kit, $(du -sh "$kit" | cut -f1), MPICH $(/usr/bin/mpiexec.hydra --version |
  awk '/Version:/ {print $2; exit}')"
