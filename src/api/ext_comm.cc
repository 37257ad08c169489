// Ferry extensions on communicators (include/ferry.h).
#include <cstring>
#include <string>

#include "api/api.h"
#include "ferry.h"

using namespace ferry;

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryCommDescribe(ncclComm_t comm, char* buf,
                                                            size_t len) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (buf == nullptr || len == 0) FERRY_FAIL(ncclInvalidArgument, "%s: empty buffer", __func__);
    std::string text = describeTopology(c->topology());
    size_t n = text.size() < len - 1 ? text.size() : len - 1;
    memcpy(buf, text.data(), n);
    buf[n] = '\0';
    return ncclSuccess;
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryBootstrapAllGather(ncclComm_t comm, void* data,
                                                                  size_t bytesPerRank) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (data == nullptr && bytesPerRank > 0) {
      FERRY_FAIL(ncclInvalidArgument, "%s: data is NULL", __func__);
    }
    LogRankScope scope(c->rank());
    return c->bootstrap()->allGather(data, bytesPerRank);
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryBootstrapBarrier(ncclComm_t comm) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    LogRankScope scope(c->rank());
    return c->bootstrap()->barrier();
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryCommPeerStats(ncclComm_t comm, int peer,
                                                             ncclFerryPeerStats_t* stats) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (stats == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: stats is NULL", __func__);
    if (peer < 0 || peer >= c->nranks()) {
      FERRY_FAIL(ncclInvalidArgument, "%s: peer %d is out of range", __func__, peer);
    }
    uint64_t v[5];
    c->p2p()->peerStats(peer, v);
    stats->sendOps = v[0];
    stats->sendBytes = v[1];
    stats->sendZeroCopyOps = v[2];
    stats->recvOps = v[3];
    stats->recvBytes = v[4];
    return ncclSuccess;
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryCommMemory(ncclComm_t comm,
                                                          unsigned long long* heldBytes,
                                                          unsigned long long* collectiveFifoBytes,
                                                          unsigned long long* stagingBytes) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (heldBytes != nullptr) *heldBytes = c->heldBytes();
    if (collectiveFifoBytes != nullptr) *collectiveFifoBytes = c->collectiveFifoBytes();
    if (stagingBytes != nullptr) *stagingBytes = c->p2p()->stagingBytes();
    return ncclSuccess;
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryCommAlgoStats(ncclComm_t comm,
                                                             unsigned long long* ringColls,
                                                             unsigned long long* hierColls) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (ringColls != nullptr) *ringColls = c->ringCollCount();
    if (hierColls != nullptr) *hierColls = c->hierCollCount();
    return ncclSuccess;
  });
}

extern "C" FERRY_VISIBLE ncclResult_t ncclFerryWindowInfo(ncclComm_t comm, ncclWindow_t win,
                                                          int* peersMapped, int* mappable) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    const Window* w = nullptr;
    FERRY_CHECK(c->windows().find(reinterpret_cast<Window*>(win), &w));
    if (peersMapped != nullptr) *peersMapped = w->peersMapped;
    if (mappable != nullptr) *mappable = w->mappable ? 1 : 0;
    return ncclSuccess;
  });
}
