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

#include "nccl.h"

namespace {

struct Lib {
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) initRank = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclGetErrorString) errorString = nullptr;
  decltype(&ncclGetVersion) version = nullptr;
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
  return lib->getUniqueId && lib->initRank && lib->destroy && lib->errorString && lib->version;
}

int envInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != nullptr ? atoi(v) : fallback;
}

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = nullptr;
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], "--lib") == 0) path = argv[i + 1];
  }
  int rank = envInt("RANK", -1), nranks = envInt("WORLD_SIZE", -1);
  if (path == nullptr || rank < 0 || nranks < 1) {
    fprintf(stderr, "usage: ferry-run -n N %s --lib LIBNCCL\n", argv[0]);
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
  auto t = std::chrono::steady_clock::now();
  r = lib.destroy(comm);
  double destroyMs = msSince(t);
  printf("lib %s version %d rank %d/%d: init %.1f ms, destroy %.1f ms\n", path, version, rank,
         nranks, initMs, destroyMs);
  return r == ncclSuccess ? 0 : 1;
}
