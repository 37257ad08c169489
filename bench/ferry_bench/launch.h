// How each op is issued through a loaded library: the collective call, or
// grouped ncclSend/ncclRecv where the library lacks ncclAlltoAll, ncclGather
// or ncclScatter, and for sendrecv (rank r sends to r+1, receives from r-1,
// in one group, as nccl-tests does). Called between the caller's group calls
// when one process drives several devices.
#pragma once

#include <string>

#include "ferry_bench/nccl_lib.h"
#include "ferry_bench/ops.h"

namespace ferry::bench {

// Issues `op` for comm rank `rank` (op.nranks ranks in all).
ncclResult_t launchOp(const NcclLib& lib, const OpCase& op, const Shape& shape, const void* send,
                      void* recv, int rank, ncclComm_t comm, cudaStream_t stream);

// Which path launchOp takes for `kind` with this library (for the header).
const char* launchPath(const NcclLib& lib, OpKind kind);

}  // namespace ferry::bench
