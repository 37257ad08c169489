// Functions whose implementation belongs to a later issue. Each validates what
// it can cheaply and answers ncclInvalidUsage with a WARN naming itself, so a
// program learns exactly what it called rather than getting a silent no-op.
#include "api/api.h"

using namespace ferry;

#define FERRY_PENDING(ret, name, params)                               \
  extern "C" FERRY_VISIBLE ret name params {                           \
    return apiGuard(#name, []() { return notYetImplemented(#name); }); \
  }                                                                    \
  FERRY_PNCCL_ALIAS(ret, name, params)

// NCCL's device API (nccl_device.h) entry points that PyTorch links. Ferry has
// no device-side API; the types are opaque here, the C ABI only needs pointers.
FERRY_PENDING(ncclResult_t, ncclDevCommCreate,
              (ncclComm_t comm, const void* requirements, void* outDevComm))
FERRY_PENDING(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, const void* devComm))
