// Status codes and the one propagation macro used everywhere inside Ferry.
//
// Internal functions return `Status` (the public ncclResult_t) and are marked
// [[nodiscard]]. FERRY_CHECK propagates a failure upwards and logs each frame
// of the chain at INFO (subsystem CALL), so NCCL_DEBUG=INFO shows where an
// error started and every caller it travelled through. No exception crosses a
// Ferry API; see api/guard.h for the one catch at every exported function.
#pragma once

#include "nccl.h"

#ifndef FERRY_NCCL_H
#error "Ferry must be built against its own include/nccl.h, not the CUDA toolkit's"
#endif

namespace ferry {

using Status = ncclResult_t;

inline bool ok(Status s) {
  return s == ncclSuccess;
}

// Human-readable text for a status (ncclGetErrorString answers with this).
const char* statusString(Status s);

}  // namespace ferry

// Propagate a non-success status to the caller, logging the call site.
// ncclInProgress is propagated too: it is not success.
#define FERRY_CHECK(expr)                           \
  do {                                              \
    ::ferry::Status ferry_status_ = (expr);         \
    if (ferry_status_ != ncclSuccess) {             \
      FERRY_LOG_CALL_FAILURE(ferry_status_, #expr); \
      return ferry_status_;                         \
    }                                               \
  } while (0)

// Return `code` with a WARN line built from printf-style arguments.
#define FERRY_FAIL(code, ...) \
  do {                        \
    FERRY_WARN(__VA_ARGS__);  \
    return (code);            \
  } while (0)

#include "core/log.h"
