// Communicator creation and teardown: ncclGetUniqueId, ncclCommInitRank*
// (Scalable too), ncclCommInitAll, ncclCommSplit, ncclCommFinalize/Destroy/
// Abort. Shrink and Revoke: shrink.cc.
#include <algorithm>
#include <vector>

#include "api/api.h"
#include "api/init_common.h"
#include "comm/group.h"
#include "runtime/device_scope.h"

using namespace ferry;

namespace ferry {

Status makeContext(const ncclConfig_t* userConfig, const CommConfig* inherited, InitContext* out) {
  out->params = Params::load();
  CommConfig base = inherited != nullptr ? *inherited : defaultConfig(out->params);
  FERRY_CHECK(resolveConfig(userConfig, base, &out->config));
  FERRY_CHECK(rt::selectRuntime(out->params.getString(ParamId::Runtime), &out->runtime));
  FERRY_CHECK(out->runtime->currentDevice(&out->device));
  return ncclSuccess;
}

Status checkRankArgs(ncclComm_t* comm, int nranks, int rank, const char* fn) {
  if (comm == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: comm pointer is NULL", fn);
  if (nranks < 1) FERRY_FAIL(ncclInvalidArgument, "%s: nranks = %d must be >= 1", fn, nranks);
  if (rank < 0 || rank >= nranks) {
    FERRY_FAIL(ncclInvalidArgument, "%s: rank = %d is out of range [0, %d)", fn, rank, nranks);
  }
  return ncclSuccess;
}

Status createAndInit(ncclComm_t* out, InitContext ctx, int nranks, int rank,
                     std::function<Status(Communicator*)> initJob) {
  auto* handle = new ncclComm();
  bool blocking = ctx.config.blocking;
  handle->impl = std::make_unique<Communicator>(std::move(ctx.params), std::move(ctx.config),
                                                ctx.runtime, nranks, rank, ctx.device);
  Communicator* c = handle->impl.get();
  // Published before init, as NCCL does, so another thread can abort it.
  *out = handle;
  GroupJob job;
  job.comm = c;
  job.blocking = blocking;
  job.run = [c, initJob]() { return initJob(c); };
  return groupSubmit(std::move(job));
}

Status freshUniqueId(const Params& params, ncclUniqueId* id) {
  return boot::createFreshUniqueId(params, id);
}

void destroyHandle(ncclComm_t handle) {
  handle->magic = 0;  // later use of the stale pointer is caught by commFromHandle when possible
  delete handle;
}

}  // namespace ferry

namespace {

Status initRank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                const ncclConfig_t* config, const char* fn) {
  FERRY_CHECK(checkRankArgs(comm, nranks, rank, fn));
  InitContext ctx;
  FERRY_CHECK(makeContext(config, nullptr, &ctx));
  return createAndInit(comm, std::move(ctx), nranks, rank,
                       [id](Communicator* c) { return c->runInit({id}); });
}

Status initScalable(ncclComm_t* comm, int nranks, int rank, int nId, const ncclUniqueId* ids,
                    const ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankScalable";
  FERRY_CHECK(checkRankArgs(comm, nranks, rank, fn));
  if (ids == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: commIds is NULL", fn);
  if (nId < 1 || nId > nranks) {
    FERRY_FAIL(ncclInvalidArgument, "%s: nId = %d must be in [1, nranks = %d]", fn, nId, nranks);
  }
  InitContext ctx;
  FERRY_CHECK(makeContext(config, nullptr, &ctx));
  std::vector<ncclUniqueId> all(ids, ids + nId);
  return createAndInit(comm, std::move(ctx), nranks, rank,
                       [all](Communicator* c) { return c->runInit(all); });
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return apiGuard(__func__, [&]() -> Status {
    if (uniqueId == nullptr) FERRY_FAIL(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    Params params = Params::load();
    return boot::createUniqueId(boot::BootstrapOptions::fromParams(params), uniqueId);
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                             ncclUniqueId commId, int rank,
                                                             ncclConfig_t* config) {
  return apiGuard(__func__,
                  [&]() { return initRank(comm, nranks, commId, rank, config, __func__); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommInitRankConfig,
                  (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                   ncclConfig_t* config))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks,
                                                       ncclUniqueId commId, int rank) {
  return apiGuard(__func__,
                  [&]() { return initRank(comm, nranks, commId, rank, nullptr, __func__); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommInitRank,
                  (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks,
                                                               int myrank, int nId,
                                                               ncclUniqueId* commIds,
                                                               ncclConfig_t* config) {
  return apiGuard(__func__,
                  [&]() { return initScalable(newcomm, nranks, myrank, nId, commIds, config); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommInitRankScalable,
                  (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                   ncclConfig_t* config))

namespace {

Status initAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) FERRY_FAIL(ncclInvalidArgument, "ncclCommInitAll: comm array is NULL");
  if (ndev < 1) FERRY_FAIL(ncclInvalidArgument, "ncclCommInitAll: ndev = %d must be >= 1", ndev);
  InitContext probe;
  FERRY_CHECK(makeContext(nullptr, nullptr, &probe));
  int count = 0;
  FERRY_CHECK(probe.runtime->deviceCount(&count));
  std::vector<int> devs(ndev);
  for (int i = 0; i < ndev; ++i) {
    devs[i] = devlist != nullptr ? devlist[i] : i;
    if (devs[i] < 0 || devs[i] >= count) {
      FERRY_FAIL(ncclInvalidArgument, "ncclCommInitAll: device %d is out of range [0, %d)", devs[i],
                 count);
    }
    if (std::count(devs.begin(), devs.begin() + i, devs[i]) > 0) {
      FERRY_FAIL(ncclInvalidUsage, "ncclCommInitAll: device %d is listed twice", devs[i]);
    }
  }
  ncclUniqueId id;
  FERRY_CHECK(freshUniqueId(probe.params, &id));
  int savedDevice = probe.device;
  FERRY_CHECK(groupStart());
  Status s = ncclSuccess;
  for (int i = 0; i < ndev && s == ncclSuccess; ++i) {
    s = probe.runtime->setDevice(devs[i]);
    if (s == ncclSuccess) s = initRank(&comms[i], ndev, id, i, nullptr, "ncclCommInitAll");
  }
  Status endStatus = groupEnd();
  (void)probe.runtime->setDevice(savedDevice);
  FERRY_CHECK(s);
  return endStatus;
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev,
                                                      const int* devlist) {
  return apiGuard(__func__, [&]() { return initAll(comm, ndev, devlist); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist))

namespace {

struct SplitEntry {
  int32_t color;
  int32_t key;
};

// Collective over the parent: every parent rank learns every (color, key);
// members of one color are ordered by (key, parent rank); the first member
// makes a unique id and sends it to the others over the parent's bootstrap.
Status split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  Communicator* parent = nullptr;
  // A revoked parent may be split (that is what revoking is for); a failed
  // one reports its error.
  FERRY_CHECK(managedComm(comm, "ncclCommSplit", &parent));
  if (parent->asyncError() != ncclSuccess) FERRY_CHECK(readyComm(comm, "ncclCommSplit", &parent));
  if (newcomm == nullptr) FERRY_FAIL(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    FERRY_FAIL(ncclInvalidArgument, "ncclCommSplit: color = %d must be >= 0 or NCCL_SPLIT_NOCOLOR",
               color);
  }
  InitContext ctx;
  FERRY_CHECK(makeContext(config, &parent->config(), &ctx));
  ctx.runtime = parent->runtime();
  ctx.device = parent->device();

  const int n = parent->nranks();
  std::vector<SplitEntry> all(n);
  all[parent->rank()] = SplitEntry{color, key};
  FERRY_CHECK(parent->bootstrap()->allGather(all.data(), sizeof(SplitEntry)));
  uint32_t tag = parent->nextSplitTag();
  *newcomm = nullptr;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;

  std::vector<int> members;
  for (int r = 0; r < n; ++r) {
    if (all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&all](int a, int b) { return all[a].key < all[b].key; });
  int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), parent->rank()) - members.begin());
  ncclUniqueId id;
  if (newRank == 0) {
    FERRY_CHECK(freshUniqueId(ctx.params, &id));
    for (size_t i = 1; i < members.size(); ++i) {
      FERRY_CHECK(parent->bootstrap()->send(members[i], tag, &id, sizeof(id)));
    }
  } else {
    FERRY_CHECK(parent->bootstrap()->recv(members[0], tag, &id, sizeof(id)));
  }
  FERRY_INFO(kLogInit, "ncclCommSplit: color %d key %d -> rank %d of %d", color, key, newRank,
             static_cast<int>(members.size()));
  return createAndInit(newcomm, std::move(ctx), static_cast<int>(members.size()), newRank,
                       [id](Communicator* c) { return c->runInit({id}); });
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                                    ncclComm_t* newcomm, ncclConfig_t* config) {
  return apiGuard(__func__, [&]() { return split(comm, color, key, newcomm, config); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommSplit,
                  (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    rt::DeviceScope device(c->runtime(), c->device());
    FERRY_CHECK(device.status());
    return c->finalize();
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return apiGuard(__func__, [&]() -> Status {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
    Communicator* c = nullptr;
    FERRY_CHECK(commFromHandle(comm, __func__, &c));
    rt::DeviceScope device(c->runtime(), c->device());
    // Destroy does not cancel: an init still running is waited for, and
    // every operation already issued completes first (as ncclCommFinalize).
    c->waitInit();
    c->joinInit();
    Status flushed = ncclSuccess;
    if (c->asyncError() == ncclSuccess) {
      flushed = c->shutdownColl(false);
      Status p = c->shutdownP2p(false);
      if (flushed == ncclSuccess) flushed = p;
    }
    destroyHandle(comm);
    return flushed;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return apiGuard(__func__, [&]() -> Status {
    if (comm == nullptr) return ncclSuccess;
    Communicator* c = nullptr;
    FERRY_CHECK(commFromHandle(comm, __func__, &c));
    rt::DeviceScope device(c->runtime(), c->device());
    c->abort();
    c->joinInit();
    destroyHandle(comm);
    return ncclSuccess;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
