#include "api/api.h"

namespace ferry {

Status commFromHandle(ncclComm_t handle, const char* fn, Communicator** out) {
  if (handle == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (handle->magic != ncclComm::kMagic || handle->impl == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "%s: comm %p is not a live communicator (destroyed?)", fn,
               static_cast<void*>(handle));
  }
  *out = handle->impl.get();
  return ncclSuccess;
}

Status readyComm(ncclComm_t handle, const char* fn, Communicator** out) {
  FERRY_CHECK(commFromHandle(handle, fn, out));
  Status s = (*out)->asyncError();
  if (s == ncclInProgress) {
    FERRY_FAIL(ncclInvalidUsage,
               "%s: communicator is still initializing; poll "
               "ncclCommGetAsyncError until it returns ncclSuccess",
               fn);
  }
  if (s != ncclSuccess) {
    const std::string why = (*out)->failure();
    FERRY_WARN("%s: communicator is in error state: %s%s%s", fn, statusString(s),
               why.empty() ? "" : ": ", why.c_str());
    return s;
  }
  if ((*out)->revoked()) {
    FERRY_FAIL(ncclInvalidUsage,
               "%s: the communicator was revoked (ncclCommRevoke): only ncclCommDestroy, "
               "ncclCommAbort, ncclCommSplit and ncclCommShrink are accepted",
               fn);
  }
  return ncclSuccess;
}

Status managedComm(ncclComm_t handle, const char* fn, Communicator** out) {
  FERRY_CHECK(commFromHandle(handle, fn, out));
  if ((*out)->asyncError() == ncclInProgress) {
    FERRY_FAIL(ncclInvalidUsage,
               "%s: communicator is still initializing; poll ncclCommGetAsyncError until it "
               "returns ncclSuccess",
               fn);
  }
  return ncclSuccess;
}

Status notYetImplemented(const char* fn) {
  FERRY_FAIL(ncclInvalidUsage, "%s is not implemented yet in this Ferry version", fn);
}

Status checkBuffer(Communicator* comm, const void* buf, uint64_t bytes, const char* what,
                   const char* fn) {
  if (bytes == 0) return ncclSuccess;
  if (buf == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: %s is NULL", fn, what);
  bool ok = false;
  FERRY_CHECK(comm->runtime()->checkUserBuffer(buf, bytes, &ok));
  if (!ok) {
    FERRY_FAIL(ncclInvalidArgument,
               "%s: %s %p is not device-accessible memory (use cudaMalloc, ncclMemAlloc or "
               "pinned host memory)",
               fn, what, buf);
  }
  return ncclSuccess;
}

Status checkRoot(Communicator* comm, int root, const char* fn) {
  if (root < 0 || root >= comm->nranks()) {
    FERRY_FAIL(ncclInvalidArgument, "%s: root %d is out of range [0, %d)", fn, root,
               comm->nranks());
  }
  return ncclSuccess;
}

}  // namespace ferry
