// A libnccl.so.2 (Ferry's or NVIDIA's) loaded with dlopen: every nccl*
// function ferry-bench calls is resolved here with dlsym, so the tool never
// links libnccl and can load two different ones in two runs.
//
// Optional symbols (ncclAlltoAll, ncclGather, ncclScatter, Ferry's
// extensions) are null when the library lacks them; callers fall back.
// The library is never unloaded: NCCL's threads and exit handlers may still
// run its code until the process exits. Read-only after load: thread-safe.
#pragma once

#include <string>

#include "ferry.h"
#include "nccl.h"

namespace ferry::bench {

struct NcclLib {
  std::string path;
  // Required.
  decltype(&ncclGetVersion) getVersion = nullptr;
  decltype(&ncclGetErrorString) getErrorString = nullptr;
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclCommInitAll) commInitAll = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  // Optional.
  decltype(&ncclGetLastError) getLastError = nullptr;
  decltype(&ncclAlltoAll) alltoAll = nullptr;
  decltype(&ncclGather) gather = nullptr;
  decltype(&ncclScatter) scatter = nullptr;
  decltype(&ncclFerryGetRuntime) ferryGetRuntime = nullptr;
  decltype(&ncclFerrySetDevice) ferrySetDevice = nullptr;
  decltype(&ncclFerryStreamCreate) ferryStreamCreate = nullptr;
  decltype(&ncclFerryStreamSynchronize) ferryStreamSynchronize = nullptr;
  decltype(&ncclFerryStreamDestroy) ferryStreamDestroy = nullptr;
  decltype(&ncclMemAlloc) memAlloc = nullptr;
  decltype(&ncclMemFree) memFree = nullptr;
  decltype(&ncclCommWindowRegister) windowRegister = nullptr;
  decltype(&ncclCommWindowDeregister) windowDeregister = nullptr;

  bool hasWindows() const { return memAlloc && memFree && windowRegister && windowDeregister; }
  bool hasFerryStreams() const {
    return ferryStreamCreate && ferryStreamSynchronize && ferryStreamDestroy;
  }
  // "<error string>" plus the library's last-error detail when it has one.
  std::string errorText(ncclResult_t result, ncclComm_t comm) const;
};

// Loads `path` ("libnccl.so.2" searches the loader path). False with a reason
// when dlopen fails or a required symbol is missing.
bool loadNcclLib(const std::string& path, NcclLib* lib, std::string* error);

}  // namespace ferry::bench
