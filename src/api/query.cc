// Version, error reporting and communicator queries.
#include <string>

#include "api/api.h"
#include "comm/group.h"

using namespace ferry;

extern "C" FERRY_VISIBLE ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) {
    FERRY_WARN("ncclGetVersion: version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclGetVersion, (int* version))

extern "C" FERRY_VISIBLE const char* ncclGetErrorString(ncclResult_t result) {
  return statusString(result);
}
FERRY_PNCCL_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result))

extern "C" FERRY_VISIBLE const char* ncclGetLastError(ncclComm_t comm) {
  // Per thread, so the pointer stays valid until this thread's next call.
  thread_local std::string last;
  try {
    last = lastWarning();
    // A communicator that failed because a peer died answers with that
    // cause (naming the peer), whatever other WARN came since.
    if (comm != nullptr && comm->magic == ncclComm::kMagic && comm->impl) {
      std::string why = comm->impl->failure();
      if (!why.empty()) last = "communicator failed: " + why;
    }
  } catch (...) {
    last.clear();
  }
  return last.c_str();
}
FERRY_PNCCL_ALIAS(const char*, ncclGetLastError, (ncclComm_t comm))

extern "C" FERRY_VISIBLE void ncclResetDebugInit(void) {
  try {
    reloadLogConfig();
  } catch (...) {
  }
}
FERRY_PNCCL_ALIAS(void, ncclResetDebugInit, (void))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                                            ncclResult_t* asyncError) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(commFromHandle(comm, __func__, &c));
    if (asyncError == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: asyncError is NULL", __func__);
    *asyncError = c->asyncError();
    return ncclSuccess;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))

namespace {

// The three integer queries differ only in what they read.
template <typename Get>
Status queryInt(ncclComm_t comm, int* out, const char* fn, Get get) {
  Communicator* c = nullptr;
  FERRY_CHECK(commFromHandle(comm, fn, &c));
  if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: output pointer is NULL", fn);
  *out = get(*c);
  return ncclSuccess;
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return apiGuard(__func__, [&]() {
    return queryInt(comm, count, __func__, [](Communicator& c) { return c.nranks(); });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return apiGuard(__func__, [&]() {
    return queryInt(comm, device, __func__, [](Communicator& c) { return c.device(); });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return apiGuard(__func__, [&]() {
    return queryInt(comm, rank, __func__, [](Communicator& c) { return c.rank(); });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

extern "C" FERRY_VISIBLE ncclResult_t ncclGroupStart(void) {
  return apiGuard(__func__, []() { return groupStart(); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclGroupStart, (void))

extern "C" FERRY_VISIBLE ncclResult_t ncclGroupEnd(void) {
  return apiGuard(__func__, []() { return groupEnd(); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclGroupEnd, (void))

namespace {

constexpr unsigned kSimInfoMagic = 0x74685283;  // NCCL_SIM_INFO_INITIALIZER's

Status simulateEnd(ncclSimInfo_t* info) {
  const char* fn = "ncclGroupSimulateEnd";
  if (info == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: simInfo is NULL", fn);
  if (info->magic != kSimInfoMagic || info->size < sizeof(ncclSimInfo_t)) {
    FERRY_FAIL(ncclInvalidArgument,
               "%s: simInfo is not initialized (assign NCCL_SIM_INFO_INITIALIZER first; magic "
               "0x%x, size %zu)",
               fn, info->magic, info->size);
  }
  float us = 0;
  Status s = groupSimulateEnd(&us);
  if (s == ncclSuccess || s == ncclInProgress) info->estimatedTime = us;
  return s;
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return apiGuard(__func__, [&]() { return simulateEnd(simInfo); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))
