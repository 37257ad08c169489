// Ferry extensions for runtime and stream handling (include/ferry.h).
#include "api/api.h"
#include "ferry.h"
#include "runtime/user_streams.h"

using namespace ferry;

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryGetRuntime(ncclFerryRuntime_t* kind) {
  return apiGuard(__func__, [&]() -> Status {
    if (kind == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: kind is NULL", __func__);
    rt::Runtime* r = nullptr;
    FERRY_CHECK(rt::selectedRuntime(&r));
    *kind = r->kind() == rt::RuntimeKind::Cuda ? ncclFerryRuntimeCuda : ncclFerryRuntimeHost;
    return ncclSuccess;
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerrySetDevice(int device) {
  return apiGuard(__func__, [&]() -> Status {
    rt::Runtime* r = nullptr;
    FERRY_CHECK(rt::selectedRuntime(&r));
    int count = 0;
    FERRY_CHECK(r->deviceCount(&count));
    if (device < 0 || device >= count) {
      FERRY_FAIL(ncclInvalidArgument, "%s: device %d is out of range [0, %d)", __func__, device,
                 count);
    }
    return r->setDevice(device);
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryGetDevice(int* device) {
  return apiGuard(__func__, [&]() -> Status {
    if (device == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: device is NULL", __func__);
    rt::Runtime* r = nullptr;
    FERRY_CHECK(rt::selectedRuntime(&r));
    return r->currentDevice(device);
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryGetDeviceCount(int* count) {
  return apiGuard(__func__, [&]() -> Status {
    if (count == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: count is NULL", __func__);
    rt::Runtime* r = nullptr;
    FERRY_CHECK(rt::selectedRuntime(&r));
    return r->deviceCount(count);
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryStreamCreate(cudaStream_t* stream) {
  return apiGuard(__func__, [&]() -> Status {
    if (stream == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: stream is NULL", __func__);
    void* handle = nullptr;
    FERRY_CHECK(rt::userStreamCreate(&handle));
    *stream = static_cast<cudaStream_t>(handle);
    return ncclSuccess;
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryStreamSynchronize(cudaStream_t stream) {
  return apiGuard(__func__, [&]() { return rt::userStreamSynchronize(stream); });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryStreamDestroy(cudaStream_t stream) {
  return apiGuard(__func__, [&]() { return rt::userStreamDestroy(stream); });
}
