// Helpers shared by the exported C functions (DESIGN.md layer 1).
//
// Every exported function is defined with FERRY_API, which gives it default
// visibility and C linkage and defines its pncclX alias, and runs its body
// through apiGuard: the one place where an exception (e.g. std::bad_alloc)
// is caught before it could cross the C ABI.
#pragma once

#include <exception>
#include <new>

#include "comm/communicator.h"
#include "core/status.h"

#define FERRY_VISIBLE __attribute__((visibility("default")))

// Declares `pnccl<name>` as an alias of `nccl<name>` (same code, same address).
#define FERRY_PNCCL_ALIAS(ret, name, args) \
  extern "C" FERRY_VISIBLE ret p##name args __attribute__((alias(#name)));

namespace ferry {

template <typename F>
Status apiGuard(const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    FERRY_WARN("%s: out of host memory", fn);
    return ncclSystemError;
  } catch (const std::exception& e) {
    FERRY_WARN("%s: internal error: %s", fn, e.what());
    return ncclInternalError;
  } catch (...) {
    FERRY_WARN("%s: unknown internal error", fn);
    return ncclInternalError;
  }
}

// Resolves a user handle, WARNing (with the function name) when it is NULL or
// not a live Ferry communicator.
[[nodiscard]] Status commFromHandle(ncclComm_t handle, const char* fn, Communicator** out);
// Like commFromHandle, and also requires a finished, successful init.
[[nodiscard]] Status readyComm(ncclComm_t handle, const char* fn, Communicator** out);
// For management calls (revoke, shrink): init finished, any state after it
// (failed or revoked included).
[[nodiscard]] Status managedComm(ncclComm_t handle, const char* fn, Communicator** out);
// Checks a user buffer of `bytes` (0: anything goes): non-NULL and memory
// the runtime's copies and kernels can use; the WARN names `fn` and `what`.
[[nodiscard]] Status checkBuffer(Communicator* comm, const void* buf, uint64_t bytes,
                                 const char* what, const char* fn);
// ncclInvalidArgument (WARN naming `fn`) unless 0 <= root < nranks.
[[nodiscard]] Status checkRoot(Communicator* comm, int root, const char* fn);
// The answer of every function a later issue implements.
[[nodiscard]] Status notYetImplemented(const char* fn);

}  // namespace ferry
