#include "runtime/runtime.h"

#include <algorithm>
#include <cctype>

#include "core/params.h"
#include "runtime/host/host_runtime.h"
#ifdef FERRY_WITH_CUDA
#include "runtime/cuda/cuda_runtime.h"
#endif

namespace ferry::rt {

const char* runtimeKindName(RuntimeKind kind) {
  switch (kind) {
    case RuntimeKind::Host:
      return "host";
    case RuntimeKind::Cuda:
      return "cuda";
  }
  return "unknown";
}

bool cudaBuilt() {
#ifdef FERRY_WITH_CUDA
  return true;
#else
  return false;
#endif
}

Status getRuntime(RuntimeKind kind, Runtime** out) {
  if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "getRuntime: null output");
  switch (kind) {
    case RuntimeKind::Host: {
      // Function-local statics: created on first use, thread-safe, and
      // deliberately leaked (streams may still be in use during exit).
      static Runtime* host =
          makeHostRuntime(HostRuntimeOptions::fromParams(Params::load())).release();
      *out = host;
      return ncclSuccess;
    }
    case RuntimeKind::Cuda: {
#ifdef FERRY_WITH_CUDA
      // Creating it touches no CUDA API: CUDA initialises on first real use.
      static Runtime* cuda = makeCudaRuntime().release();
      *out = cuda;
      return ncclSuccess;
#else
      FERRY_FAIL(ncclInvalidUsage,
                 "the CUDA runtime was requested but this build has no CUDA "
                 "(configure with -DFERRY_CUDA=ON)");
#endif
    }
  }
  FERRY_FAIL(ncclInvalidArgument, "getRuntime: unknown kind %d", static_cast<int>(kind));
}

namespace {

// Whether a CUDA device is usable; never fails (no driver = no device).
bool cudaDeviceVisible(Runtime** cuda) {
  if (!cudaBuilt() || getRuntime(RuntimeKind::Cuda, cuda) != ncclSuccess) return false;
  int count = 0;
  return (*cuda)->deviceCount(&count) == ncclSuccess && count > 0;
}

}  // namespace

Status selectRuntime(const std::string& choice, Runtime** out) {
  if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "selectRuntime: null output");
  std::string c = choice;
  std::transform(c.begin(), c.end(), c.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (c == "host") return getRuntime(RuntimeKind::Host, out);
  Runtime* cuda = nullptr;
  if (c == "cuda") {
    if (!cudaBuilt()) {
      FERRY_FAIL(ncclInvalidUsage, "FERRY_RUNTIME=cuda but this build has no CUDA runtime");
    }
    if (!cudaDeviceVisible(&cuda)) {
      FERRY_FAIL(ncclInvalidUsage, "FERRY_RUNTIME=cuda but no CUDA device is visible");
    }
    *out = cuda;
    return ncclSuccess;
  }
  if (c == "auto" || c.empty()) {
    if (cudaDeviceVisible(&cuda)) {
      *out = cuda;
    } else {
      FERRY_CHECK(getRuntime(RuntimeKind::Host, out));
    }
    FERRY_INFO(kLogInit, "runtime: auto selected %s", runtimeKindName((*out)->kind()));
    return ncclSuccess;
  }
  FERRY_FAIL(ncclInvalidArgument, "FERRY_RUNTIME='%s' is not one of auto, cuda, host",
             choice.c_str());
}

}  // namespace ferry::rt
