// Point-to-point API: ncclSend/ncclRecv and the grouped-p2p collectives
// ncclAlltoAll, ncclGather, ncclScatter. Calls outside a group form a group
// of one (as in NCCL); everything is issued at the outermost ncclGroupEnd.
#include <limits>

#include "algo/reduce_ops.h"
#include "api/api.h"
#include "comm/group.h"

using namespace ferry;

namespace {

// Validates what every p2p-based call shares and returns the byte count.
Status checkCommon(ncclComm_t handle, size_t count, ncclDataType_t type, const char* fn,
                   Communicator** comm, uint64_t* bytes) {
  FERRY_CHECK(readyComm(handle, fn, comm));
  if ((*comm)->finalized()) FERRY_FAIL(ncclInvalidUsage, "%s: communicator was finalized", fn);
  size_t size = algo::typeBytes(static_cast<int>(type));
  if (size == 0)
    FERRY_FAIL(ncclInvalidArgument, "%s: invalid datatype %d", fn, static_cast<int>(type));
  if (count > std::numeric_limits<uint64_t>::max() / 64 / size) {
    FERRY_FAIL(ncclInvalidArgument, "%s: count %zu is too large", fn, count);
  }
  *bytes = static_cast<uint64_t>(count) * size;
  return ncclSuccess;
}

Status checkPeer(Communicator* comm, int peer, bool send, const char* fn) {
  if (peer < 0 || peer >= comm->nranks()) {
    FERRY_FAIL(ncclInvalidArgument, "%s: peer %d is out of range [0, %d)", fn, peer,
               comm->nranks());
  }
  if (!comm->p2p()->reaches(peer, send)) {
    FERRY_FAIL(ncclInvalidUsage,
               "%s: no transport reaches peer %d (NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are both "
               "set on this rank or the peer)",
               fn, peer);
  }
  return ncclSuccess;
}

void add(Communicator* comm, bool send, int peer, const void* buf, uint64_t bytes, cudaStream_t s) {
  P2pTask t;
  t.isSend = send;
  t.peer = peer;
  t.buffer = const_cast<void*>(buf);
  t.bytes = bytes;
  t.stream = s;
  groupAddP2p(comm, t);
}

// Runs `body` (which adds tasks) inside a group, so a call outside the
// user's groups is issued at once, and a failed validation adds nothing.
template <typename Body>
Status inGroup(Body body) {
  FERRY_CHECK(groupStart());
  Status s = body();
  Status e = groupEnd();
  return s != ncclSuccess ? s : e;
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclSend(const void* sendbuff, size_t count,
                                               ncclDataType_t datatype, int peer, ncclComm_t comm,
                                               cudaStream_t stream) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    uint64_t bytes = 0;
    FERRY_CHECK(checkCommon(comm, count, datatype, "ncclSend", &c, &bytes));
    FERRY_CHECK(checkPeer(c, peer, true, "ncclSend"));
    FERRY_CHECK(checkBuffer(c, sendbuff, bytes, "sendbuff", "ncclSend"));
    return inGroup([&]() {
      add(c, true, peer, sendbuff, bytes, stream);
      return ncclSuccess;
    });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclSend,
                  (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                   ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclRecv(void* recvbuff, size_t count,
                                               ncclDataType_t datatype, int peer, ncclComm_t comm,
                                               cudaStream_t stream) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    uint64_t bytes = 0;
    FERRY_CHECK(checkCommon(comm, count, datatype, "ncclRecv", &c, &bytes));
    FERRY_CHECK(checkPeer(c, peer, false, "ncclRecv"));
    FERRY_CHECK(checkBuffer(c, recvbuff, bytes, "recvbuff", "ncclRecv"));
    return inGroup([&]() {
      add(c, false, peer, recvbuff, bytes, stream);
      return ncclSuccess;
    });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclRecv,
                  (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                   cudaStream_t stream))

namespace {

// Shared shape of the three grouped collectives: validates every peer and
// both buffers (nranks blocks on the side that holds them), then adds tasks.
Status checkAllPeers(Communicator* c, const char* fn) {
  for (int p = 0; p < c->nranks(); ++p) {
    FERRY_CHECK(checkPeer(c, p, true, fn));
    FERRY_CHECK(checkPeer(c, p, false, fn));
  }
  return ncclSuccess;
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff,
                                                   size_t count, ncclDataType_t datatype,
                                                   ncclComm_t comm, cudaStream_t stream) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    uint64_t bytes = 0;
    FERRY_CHECK(checkCommon(comm, count, datatype, "ncclAlltoAll", &c, &bytes));
    FERRY_CHECK(checkAllPeers(c, "ncclAlltoAll"));
    const int n = c->nranks();
    FERRY_CHECK(checkBuffer(c, sendbuff, bytes * n, "sendbuff", "ncclAlltoAll"));
    FERRY_CHECK(checkBuffer(c, recvbuff, bytes * n, "recvbuff", "ncclAlltoAll"));
    return inGroup([&]() {
      for (int p = 0; p < n; ++p) {
        add(c, true, p, static_cast<const char*>(sendbuff) + bytes * p, bytes, stream);
        add(c, false, p, static_cast<char*>(recvbuff) + bytes * p, bytes, stream);
      }
      return ncclSuccess;
    });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclAlltoAll,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                                 cudaStream_t stream) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    uint64_t bytes = 0;
    FERRY_CHECK(checkCommon(comm, count, datatype, "ncclGather", &c, &bytes));
    FERRY_CHECK(checkRoot(c, root, "ncclGather"));
    FERRY_CHECK(checkAllPeers(c, "ncclGather"));
    const int n = c->nranks();
    FERRY_CHECK(checkBuffer(c, sendbuff, bytes, "sendbuff", "ncclGather"));
    if (c->rank() == root)
      FERRY_CHECK(checkBuffer(c, recvbuff, bytes * n, "recvbuff", "ncclGather"));
    return inGroup([&]() {
      add(c, true, root, sendbuff, bytes, stream);
      if (c->rank() == root) {
        for (int p = 0; p < n; ++p)
          add(c, false, p, static_cast<char*>(recvbuff) + bytes * p, bytes, stream);
      }
      return ncclSuccess;
    });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclGather,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   int root, ncclComm_t comm, cudaStream_t stream))

extern "C" FERRY_VISIBLE ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff,
                                                  size_t count, ncclDataType_t datatype, int root,
                                                  ncclComm_t comm, cudaStream_t stream) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    uint64_t bytes = 0;
    FERRY_CHECK(checkCommon(comm, count, datatype, "ncclScatter", &c, &bytes));
    FERRY_CHECK(checkRoot(c, root, "ncclScatter"));
    FERRY_CHECK(checkAllPeers(c, "ncclScatter"));
    const int n = c->nranks();
    if (c->rank() == root)
      FERRY_CHECK(checkBuffer(c, sendbuff, bytes * n, "sendbuff", "ncclScatter"));
    FERRY_CHECK(checkBuffer(c, recvbuff, bytes, "recvbuff", "ncclScatter"));
    return inGroup([&]() {
      if (c->rank() == root) {
        for (int p = 0; p < n; ++p)
          add(c, true, p, static_cast<const char*>(sendbuff) + bytes * p, bytes, stream);
      }
      add(c, false, root, recvbuff, bytes, stream);
      return ncclSuccess;
    });
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclScatter,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   int root, ncclComm_t comm, cudaStream_t stream))
