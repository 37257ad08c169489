#include "ferry_bench/launch.h"

#include "ferry_bench/element.h"

namespace ferry::bench {
namespace {

// Runs `issue` inside ncclGroupStart/End; the group is always closed, and the
// first error wins.
template <typename Issue>
ncclResult_t grouped(const NcclLib& lib, Issue issue) {
  ncclResult_t r = lib.groupStart();
  if (r != ncclSuccess) return r;
  const ncclResult_t issued = issue();
  const ncclResult_t ended = lib.groupEnd();
  return issued != ncclSuccess ? issued : ended;
}

const char* at(const void* base, size_t elements, size_t elemSize) {
  return static_cast<const char*>(base) + elements * elemSize;
}

ncclResult_t alltoallP2p(const NcclLib& lib, const OpCase& op, size_t base, const void* send,
                         void* recv, ncclComm_t comm, cudaStream_t stream) {
  const size_t es = typeSize(op.type);
  return grouped(lib, [&]() {
    for (int p = 0; p < op.nranks; ++p) {
      ncclResult_t r = lib.send(at(send, p * base, es), base, op.type, p, comm, stream);
      if (r == ncclSuccess)
        r = lib.recv(const_cast<char*>(at(recv, p * base, es)), base, op.type, p, comm, stream);
      if (r != ncclSuccess) return r;
    }
    return ncclSuccess;
  });
}

ncclResult_t gatherP2p(const NcclLib& lib, const OpCase& op, size_t base, const void* send,
                       void* recv, int rank, ncclComm_t comm, cudaStream_t stream) {
  const size_t es = typeSize(op.type);
  return grouped(lib, [&]() {
    ncclResult_t r = lib.send(send, base, op.type, op.root, comm, stream);
    for (int p = 0; r == ncclSuccess && rank == op.root && p < op.nranks; ++p) {
      r = lib.recv(const_cast<char*>(at(recv, p * base, es)), base, op.type, p, comm, stream);
    }
    return r;
  });
}

ncclResult_t scatterP2p(const NcclLib& lib, const OpCase& op, size_t base, const void* send,
                        void* recv, int rank, ncclComm_t comm, cudaStream_t stream) {
  const size_t es = typeSize(op.type);
  return grouped(lib, [&]() {
    ncclResult_t r = ncclSuccess;
    for (int p = 0; rank == op.root && p < op.nranks && r == ncclSuccess; ++p) {
      r = lib.send(at(send, p * base, es), base, op.type, p, comm, stream);
    }
    if (r == ncclSuccess) r = lib.recv(recv, base, op.type, op.root, comm, stream);
    return r;
  });
}

}  // namespace

ncclResult_t launchOp(const NcclLib& lib, const OpCase& op, const Shape& shape, const void* send,
                      void* recv, int rank, ncclComm_t comm, cudaStream_t stream) {
  const size_t count = shape.paramCount;
  const int n = op.nranks;
  switch (op.kind) {
    case OpKind::AllReduce:
      return lib.allReduce(send, recv, count, op.type, op.redop, comm, stream);
    case OpKind::AllGather:
      return lib.allGather(send, recv, count, op.type, comm, stream);
    case OpKind::ReduceScatter:
      return lib.reduceScatter(send, recv, count, op.type, op.redop, comm, stream);
    case OpKind::Broadcast:
      return lib.broadcast(send, recv, count, op.type, op.root, comm, stream);
    case OpKind::Reduce:
      return lib.reduce(send, recv, count, op.type, op.redop, op.root, comm, stream);
    case OpKind::AlltoAll:
      if (lib.alltoAll != nullptr) return lib.alltoAll(send, recv, count, op.type, comm, stream);
      return alltoallP2p(lib, op, count, send, recv, comm, stream);
    case OpKind::SendRecv:
      return grouped(lib, [&]() {
        ncclResult_t r = lib.send(send, count, op.type, (rank + 1) % n, comm, stream);
        if (r == ncclSuccess) r = lib.recv(recv, count, op.type, (rank - 1 + n) % n, comm, stream);
        return r;
      });
    case OpKind::Gather:
      if (lib.gather != nullptr)
        return lib.gather(send, recv, count, op.type, op.root, comm, stream);
      return gatherP2p(lib, op, count, send, recv, rank, comm, stream);
    case OpKind::Scatter:
      if (lib.scatter != nullptr) {
        return lib.scatter(send, recv, count, op.type, op.root, comm, stream);
      }
      return scatterP2p(lib, op, count, send, recv, rank, comm, stream);
  }
  return ncclInvalidArgument;
}

const char* launchPath(const NcclLib& lib, OpKind kind) {
  switch (kind) {
    case OpKind::AlltoAll:
      return lib.alltoAll != nullptr ? "ncclAlltoAll" : "grouped send/recv";
    case OpKind::Gather:
      return lib.gather != nullptr ? "ncclGather" : "grouped send/recv";
    case OpKind::Scatter:
      return lib.scatter != nullptr ? "ncclScatter" : "grouped send/recv";
    case OpKind::SendRecv:
      return "grouped send/recv";
    default:
      return "collective";
  }
}

}  // namespace ferry::bench
