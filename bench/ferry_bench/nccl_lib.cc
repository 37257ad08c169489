#include "ferry_bench/nccl_lib.h"

#include <dlfcn.h>

namespace ferry::bench {
namespace {

template <typename Fn>
void resolve(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
}

}  // namespace

std::string NcclLib::errorText(ncclResult_t result, ncclComm_t comm) const {
  std::string text = getErrorString != nullptr ? getErrorString(result) : "error";
  if (getLastError != nullptr) {
    const char* last = getLastError(comm);
    if (last != nullptr && last[0] != '\0') text += std::string(": ") + last;
  }
  return text;
}

bool loadNcclLib(const std::string& path, NcclLib* lib, std::string* error) {
  // RTLD_LOCAL: two runs never share a process, but keep the symbols private
  // to this handle so nothing else in the process binds to them by accident.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *error = std::string("dlopen ") + path + ": " + dlerror();
    return false;
  }
  NcclLib l;
  l.path = path;
  resolve(h, "ncclGetVersion", &l.getVersion);
  resolve(h, "ncclGetErrorString", &l.getErrorString);
  resolve(h, "ncclGetUniqueId", &l.getUniqueId);
  resolve(h, "ncclCommInitRank", &l.commInitRank);
  resolve(h, "ncclCommInitAll", &l.commInitAll);
  resolve(h, "ncclCommDestroy", &l.commDestroy);
  resolve(h, "ncclGroupStart", &l.groupStart);
  resolve(h, "ncclGroupEnd", &l.groupEnd);
  resolve(h, "ncclAllReduce", &l.allReduce);
  resolve(h, "ncclAllGather", &l.allGather);
  resolve(h, "ncclReduceScatter", &l.reduceScatter);
  resolve(h, "ncclBroadcast", &l.broadcast);
  resolve(h, "ncclReduce", &l.reduce);
  resolve(h, "ncclSend", &l.send);
  resolve(h, "ncclRecv", &l.recv);
  const std::pair<const char*, bool> required[] = {
      {"ncclGetVersion", l.getVersion != nullptr},
      {"ncclGetErrorString", l.getErrorString != nullptr},
      {"ncclGetUniqueId", l.getUniqueId != nullptr},
      {"ncclCommInitRank", l.commInitRank != nullptr},
      {"ncclCommInitAll", l.commInitAll != nullptr},
      {"ncclCommDestroy", l.commDestroy != nullptr},
      {"ncclGroupStart", l.groupStart != nullptr},
      {"ncclGroupEnd", l.groupEnd != nullptr},
      {"ncclAllReduce", l.allReduce != nullptr},
      {"ncclAllGather", l.allGather != nullptr},
      {"ncclReduceScatter", l.reduceScatter != nullptr},
      {"ncclBroadcast", l.broadcast != nullptr},
      {"ncclReduce", l.reduce != nullptr},
      {"ncclSend", l.send != nullptr},
      {"ncclRecv", l.recv != nullptr}};
  for (const auto& [name, found] : required) {
    if (!found) {
      *error = path + " lacks " + name;
      return false;  // the handle stays loaded: see the header
    }
  }
  resolve(h, "ncclGetLastError", &l.getLastError);
  resolve(h, "ncclAlltoAll", &l.alltoAll);
  resolve(h, "ncclGather", &l.gather);
  resolve(h, "ncclScatter", &l.scatter);
  resolve(h, "ncclFerryGetRuntime", &l.ferryGetRuntime);
  resolve(h, "ncclFerrySetDevice", &l.ferrySetDevice);
  resolve(h, "ncclFerryStreamCreate", &l.ferryStreamCreate);
  resolve(h, "ncclFerryStreamSynchronize", &l.ferryStreamSynchronize);
  resolve(h, "ncclFerryStreamDestroy", &l.ferryStreamDestroy);
  resolve(h, "ncclMemAlloc", &l.memAlloc);
  resolve(h, "ncclMemFree", &l.memFree);
  resolve(h, "ncclCommWindowRegister", &l.windowRegister);
  resolve(h, "ncclCommWindowDeregister", &l.windowDeregister);
  *lib = l;
  return true;
}

}  // namespace ferry::bench
