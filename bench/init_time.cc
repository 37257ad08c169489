// Measures communicator init time for any libnccl.so.2 (Ferry's or NVIDIA's),
// loaded with dlopen, so both are timed by the same code in the same run:
//
//   ferry-run -n 2 build/bench/ferry-init-time --lib build/libnccl.so.2
//   ferry-run -n 2 build/bench/ferry-init-time --lib /path/to/nvidia/libnccl.so.2
//
// Each rank selects GPU FERRY_DEVICE (set by ferry-run), creates the CUDA
// context first (not counted), then times ncclGetUniqueId + ncclCommInitRank
// (NCCL_COMM_ID rendezvous) and ncclCommDestroy. Rank 0 prints the result.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/proc.h"
#include "nccl.h"

namespace {

struct Lib {
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) initRank = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclGetErrorString) errorString = nullptr;
  decltype(&ncclGetVersion) version = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
};

bool loadLib(const char* path, Lib* lib) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return false;
  }
  lib->getUniqueId = reinterpret_cast<decltype(lib->getUniqueId)>(dlsym(h, "ncclGetUniqueId"));
  lib->initRank = reinterpret_cast<decltype(lib->initRank)>(dlsym(h, "ncclCommInitRank"));
  lib->destroy = reinterpret_cast<decltype(lib->destroy)>(dlsym(h, "ncclCommDestroy"));
  lib->errorString = reinterpret_cast<decltype(lib->errorString)>(dlsym(h, "ncclGetErrorString"));
  lib->version = reinterpret_cast<decltype(lib->version)>(dlsym(h, "ncclGetVersion"));
  lib->send = reinterpret_cast<decltype(lib->send)>(dlsym(h, "ncclSend"));
  lib->recv = reinterpret_cast<decltype(lib->recv)>(dlsym(h, "ncclRecv"));
  lib->groupStart = reinterpret_cast<decltype(lib->groupStart)>(dlsym(h, "ncclGroupStart"));
  lib->groupEnd = reinterpret_cast<decltype(lib->groupEnd)>(dlsym(h, "ncclGroupEnd"));
  return lib->getUniqueId && lib->initRank && lib->destroy && lib->errorString && lib->version &&
         lib->send && lib->recv && lib->groupStart && lib->groupEnd;
}

int envInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != nullptr ? atoi(v) : fallback;
}

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// One all-to-all of `bytes` per peer, waited for: the connections a
// library makes on first use (NCCL's runtime connect) are paid here.
ncclResult_t allToAll(const Lib& lib, ncclComm_t comm, int nranks, size_t bytes, double* ms) {
  char* buf = nullptr;
  const size_t total = bytes * static_cast<size_t>(nranks);
  if (cudaMalloc(&buf, 2 * total) != cudaSuccess) return ncclUnhandledCudaError;
  auto t = std::chrono::steady_clock::now();
  ncclResult_t r = lib.groupStart();
  for (int p = 0; p < nranks && r == ncclSuccess; ++p) {
    r = lib.send(buf + p * bytes, bytes, ncclInt8, p, comm, nullptr);
    if (r == ncclSuccess) r = lib.recv(buf + total + p * bytes, bytes, ncclInt8, p, comm, nullptr);
  }
  ncclResult_t e = lib.groupEnd();
  if (r == ncclSuccess) r = e;
  if (r == ncclSuccess && cudaDeviceSynchronize() != cudaSuccess) r = ncclUnhandledCudaError;
  *ms = msSince(t);
  cudaFree(buf);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = nullptr;
  long a2aBytes = 0;  // --a2a BYTES: also time the first two all-to-alls
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], "--lib") == 0) path = argv[i + 1];
    if (strcmp(argv[i], "--a2a") == 0) a2aBytes = atol(argv[i + 1]);
  }
  int rank = envInt("RANK", -1), nranks = envInt("WORLD_SIZE", -1);
  if (path == nullptr || rank < 0 || nranks < 1) {
    fprintf(stderr, "usage: ferry-run -n N %s --lib LIBNCCL [--a2a BYTES]\n", argv[0]);
    return 2;
  }
  Lib lib;
  if (!loadLib(path, &lib)) return 1;
  if (cudaSetDevice(envInt("FERRY_DEVICE", rank)) != cudaSuccess ||
      cudaFree(nullptr) != cudaSuccess) {
    fprintf(stderr, "no usable GPU for rank %d\n", rank);
    return 1;
  }
  int version = 0;
  lib.version(&version);
  const long fdsBefore = ferry::test::countOpenFds();
  auto start = std::chrono::steady_clock::now();
  ncclUniqueId id;
  ncclResult_t r = lib.getUniqueId(&id);
  ncclComm_t comm = nullptr;
  if (r == ncclSuccess) r = lib.initRank(&comm, nranks, id, rank);
  double initMs = msSince(start);
  if (r != ncclSuccess) {
    fprintf(stderr, "init failed: %s\n", lib.errorString(r));
    return 1;
  }
  const long fds = ferry::test::countOpenFds() - fdsBefore;
  char a2a[160] = "";
  if (a2aBytes > 0) {
    double first = 0, second = 0;
    r = allToAll(lib, comm, nranks, static_cast<size_t>(a2aBytes), &first);
    if (r == ncclSuccess) r = allToAll(lib, comm, nranks, static_cast<size_t>(a2aBytes), &second);
    if (r != ncclSuccess) {
      fprintf(stderr, "all-to-all failed: %s\n", lib.errorString(r));
      return 1;
    }
    snprintf(a2a, sizeof(a2a),
             "; first all-to-all of %ld B %.1f ms, second %.1f ms, %ld descriptors", a2aBytes,
             first, second, ferry::test::countOpenFds() - fdsBefore);
  }
  auto t = std::chrono::steady_clock::now();
  r = lib.destroy(comm);
  double destroyMs = msSince(t);
  printf("lib %s version %d rank %d/%d: init %.1f ms, destroy %.1f ms, %ld descriptors%s\n", path,
         version, rank, nranks, initMs, destroyMs, fds, a2a);
  return r == ncclSuccess ? 0 : 1;
}
