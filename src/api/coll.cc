// Collective API: ncclAllReduce, ncclAllGather, ncclReduceScatter,
// ncclBroadcast / ncclBcast, ncclReduce, and user reduction ops
// (ncclRedOpCreatePreMulSum / ncclRedOpDestroy). Every call is validated in
// full before it joins the group, so a bad call adds nothing and later
// calls still work. Calls outside a group form a group of one.
#include <limits>

#include "algo/coll_ring.h"
#include "api/api.h"
#include "comm/group.h"

using namespace ferry;

namespace {

struct CollCall {
  int coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t type;
  int op;  // ignored by all-gather and broadcast
  int root;
  cudaStream_t stream;
};

// Bytes of the send and receive buffers this rank touches.
void bufferBytes(const CollCall& k, int nranks, int rank, uint64_t elt, uint64_t* send,
                 uint64_t* recv) {
  const uint64_t b = static_cast<uint64_t>(k.count) * elt;
  const uint64_t n = static_cast<uint64_t>(nranks);
  switch (k.coll) {
    case algo::kCollAllGather:
      *send = b, *recv = b * n;
      break;
    case algo::kCollReduceScatter:
      *send = b * n, *recv = b;
      break;
    case algo::kCollBroadcast:
      *send = rank == k.root ? b : 0, *recv = b;
      break;
    case algo::kCollReduce:
      *send = b, *recv = rank == k.root ? b : 0;
      break;
    default:
      *send = b, *recv = b;
  }
}

Status submit(ncclComm_t handle, const CollCall& k, const char* fn) {
  Communicator* c = nullptr;
  FERRY_CHECK(readyComm(handle, fn, &c));
  if (c->finalized()) FERRY_FAIL(ncclInvalidUsage, "%s: communicator was finalized", fn);
  const uint64_t elt = algo::typeBytes(static_cast<int>(k.type));
  if (elt == 0)
    FERRY_FAIL(ncclInvalidArgument, "%s: invalid datatype %d", fn, static_cast<int>(k.type));
  if (k.count >
      std::numeric_limits<uint64_t>::max() / 64 / elt / static_cast<uint64_t>(c->nranks())) {
    FERRY_FAIL(ncclInvalidArgument, "%s: count %zu is too large", fn, k.count);
  }
  const bool reduces = k.coll != algo::kCollAllGather && k.coll != algo::kCollBroadcast;
  if (reduces) FERRY_CHECK(c->coll()->checkOp(k.op, static_cast<int>(k.type), fn));
  if (k.coll == algo::kCollBroadcast || k.coll == algo::kCollReduce) {
    FERRY_CHECK(checkRoot(c, k.root, fn));
  }
  uint64_t sendBytes = 0, recvBytes = 0;
  bufferBytes(k, c->nranks(), c->rank(), elt, &sendBytes, &recvBytes);
  FERRY_CHECK(checkBuffer(c, k.sendbuff, sendBytes, "sendbuff", fn));
  FERRY_CHECK(checkBuffer(c, k.recvbuff, recvBytes, "recvbuff", fn));
  if (k.count == 0) return ncclSuccess;  // nothing moves (as NCCL: no launch)
  if (!c->coll()->available()) {
    FERRY_FAIL(ncclInvalidUsage,
               "%s: collectives across hosts need a network transport, which "
               "Ferry does not have yet",
               fn);
  }
  CollTask t;
  t.coll = k.coll;
  t.sendbuff = k.sendbuff;
  t.recvbuff = k.recvbuff;
  t.count = k.count;
  t.dataType = static_cast<int>(k.type);
  t.op = reduces ? k.op : 0;
  t.root = k.root;
  t.stream = k.stream;
  FERRY_CHECK(groupStart());
  groupAddColl(c, t);
  return groupEnd();
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                    size_t count, ncclDataType_t datatype,
                                                    ncclRedOp_t op, ncclComm_t comm,
                                                    cudaStream_t stream) {
  return apiGuard("ncclAllReduce", [&]() {
    return submit(comm,
                  {algo::kCollAllReduce, sendbuff, recvbuff, count, datatype, static_cast<int>(op),
                   0, stream},
                  "ncclAllReduce");
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclAllReduce,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff,
                                                    size_t sendcount, ncclDataType_t datatype,
                                                    ncclComm_t comm, cudaStream_t stream) {
  return apiGuard("ncclAllGather", [&]() {
    return submit(comm,
                  {algo::kCollAllGather, sendbuff, recvbuff, sendcount, datatype, -1, 0, stream},
                  "ncclAllGather");
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclAllGather,
                  (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                   ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                        size_t recvcount, ncclDataType_t datatype,
                                                        ncclRedOp_t op, ncclComm_t comm,
                                                        cudaStream_t stream) {
  return apiGuard("ncclReduceScatter", [&]() {
    return submit(comm,
                  {algo::kCollReduceScatter, sendbuff, recvbuff, recvcount, datatype,
                   static_cast<int>(op), 0, stream},
                  "ncclReduceScatter");
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclReduceScatter,
                  (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff,
                                                    size_t count, ncclDataType_t datatype, int root,
                                                    ncclComm_t comm, cudaStream_t stream) {
  return apiGuard("ncclBroadcast", [&]() {
    return submit(comm,
                  {algo::kCollBroadcast, sendbuff, recvbuff, count, datatype, -1, root, stream},
                  "ncclBroadcast");
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclBroadcast,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   int root, ncclComm_t comm, cudaStream_t stream))

// The legacy in-place broadcast.
extern "C" FERRY_VISIBLE ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                                                int root, ncclComm_t comm, cudaStream_t stream) {
  return apiGuard("ncclBcast", [&]() {
    return submit(comm, {algo::kCollBroadcast, buff, buff, count, datatype, -1, root, stream},
                  "ncclBcast");
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclBcast,
                  (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                   cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                 ncclDataType_t datatype, ncclRedOp_t op, int root,
                                                 ncclComm_t comm, cudaStream_t stream) {
  return apiGuard("ncclReduce", [&]() {
    return submit(comm,
                  {algo::kCollReduce, sendbuff, recvbuff, count, datatype, static_cast<int>(op),
                   root, stream},
                  "ncclReduce");
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclReduce,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                               ncclDataType_t datatype,
                                                               ncclScalarResidence_t residence,
                                                               ncclComm_t comm) {
  return apiGuard("ncclRedOpCreatePreMulSum", [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, "ncclRedOpCreatePreMulSum", &c));
    if (op == nullptr)
      FERRY_FAIL(ncclInvalidArgument, "%s: op is NULL", "ncclRedOpCreatePreMulSum");
    int id = 0;
    FERRY_CHECK(c->coll()->createPreMulSum(scalar, static_cast<int>(datatype),
                                           static_cast<int>(residence), &id));
    *op = static_cast<ncclRedOp_t>(id);
    return ncclSuccess;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum,
                  (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype,
                   ncclScalarResidence_t residence, ncclComm_t comm))

extern "C" FERRY_VISIBLE ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return apiGuard("ncclRedOpDestroy", [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, "ncclRedOpDestroy", &c));
    return c->coll()->destroyOp(static_cast<int>(op));
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
