// ncclCommRevoke and ncclCommShrink: the recovery path after a failure. A
// framework whose communicator failed (a peer died: comm/liveness.h) or
// that wants to stop one revokes it or shrinks it: the ranks that remain
// build a new communicator without the excluded ones, over the parent's
// bootstrap, never waiting for an excluded rank.
#include <algorithm>
#include <vector>

#include "api/api.h"
#include "api/init_common.h"
#include "core/hash.h"
#include "runtime/device_scope.h"

using namespace ferry;

namespace {

// What the first remaining rank sends the others: the new communicator's
// id, and a digest of the exclude list so that ranks that were given
// different lists fail clearly instead of building different communicators.
struct ShrinkOffer {
  ncclUniqueId id;
  uint64_t listDigest;
};

Status checkExcludes(int nranks, const int* list, int count, std::vector<bool>* excluded) {
  const char* fn = "ncclCommShrink";
  if (count < 0) FERRY_FAIL(ncclInvalidArgument, "%s: excludeRanksCount = %d < 0", fn, count);
  if (count > 0 && list == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "%s: excludeRanksList is NULL with a count of %d", fn, count);
  }
  excluded->assign(nranks, false);
  for (int i = 0; i < count; ++i) {
    if (list[i] < 0 || list[i] >= nranks) {
      FERRY_FAIL(ncclInvalidArgument, "%s: excluded rank %d is out of range [0, %d)", fn, list[i],
                 nranks);
    }
    if ((*excluded)[list[i]]) {
      FERRY_FAIL(ncclInvalidArgument, "%s: rank %d is excluded twice", fn, list[i]);
    }
    (*excluded)[list[i]] = true;
  }
  if (count == nranks) FERRY_FAIL(ncclInvalidArgument, "%s: every rank is excluded", fn);
  return ncclSuccess;
}

uint64_t digestOf(const std::vector<bool>& excluded) {
  std::vector<uint8_t> bytes(excluded.begin(), excluded.end());
  return fnv1a(bytes.data(), bytes.size());
}

Status shrink(ncclComm_t comm, int* excludeList, int excludeCount, ncclComm_t* newcomm,
              ncclConfig_t* config, int flags) {
  const char* fn = "ncclCommShrink";
  Communicator* parent = nullptr;
  FERRY_CHECK(managedComm(comm, fn, &parent));
  if (newcomm == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  if ((flags & ~NCCL_SHRINK_ABORT) != 0) {
    FERRY_FAIL(ncclInvalidArgument,
               "%s: unknown shrinkFlags 0x%x (NCCL_SHRINK_DEFAULT or "
               "NCCL_SHRINK_ABORT)",
               fn, flags);
  }
  std::vector<bool> excluded;
  FERRY_CHECK(checkExcludes(parent->nranks(), excludeList, excludeCount, &excluded));
  InitContext ctx;
  FERRY_CHECK(makeContext(config, &parent->config(), &ctx));
  ctx.runtime = parent->runtime();
  ctx.device = parent->device();
  *newcomm = nullptr;
  if ((flags & NCCL_SHRINK_ABORT) != 0) {
    rt::DeviceScope device(parent->runtime(), parent->device());
    FERRY_CHECK(device.status());
    FERRY_CHECK(parent->revoke());
  }
  // Every caller takes the next tag, an excluded one too, so that later
  // splits and shrinks of the parent still agree on theirs (they are called
  // in the same order on every rank, as NCCL requires).
  uint32_t tag = parent->nextSplitTag();
  if (excluded[parent->rank()]) {
    FERRY_INFO(kLogInit, "%s: rank %d is excluded: no new communicator", fn, parent->rank());
    return ncclSuccess;
  }
  std::vector<int> members;
  for (int r = 0; r < parent->nranks(); ++r) {
    if (!excluded[r]) members.push_back(r);
  }
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), parent->rank()) - members.begin());
  ShrinkOffer offer{};
  const uint64_t digest = digestOf(excluded);
  if (newRank == 0) {
    FERRY_CHECK(freshUniqueId(ctx.params, &offer.id));
    offer.listDigest = digest;
    for (size_t i = 1; i < members.size(); ++i) {
      FERRY_CHECK(parent->bootstrap()->send(members[i], tag, &offer, sizeof(offer)));
    }
  } else {
    FERRY_CHECK(parent->bootstrap()->recv(members[0], tag, &offer, sizeof(offer)));
    if (offer.listDigest != digest) {
      FERRY_FAIL(ncclInvalidArgument,
                 "%s: rank %d was given another exclude list than rank %d (every remaining "
                 "rank must pass the same ranks)",
                 fn, parent->rank(), members[0]);
    }
  }
  FERRY_INFO(kLogInit, "%s: parent rank %d -> rank %d of %d (%d excluded%s)", fn, parent->rank(),
             newRank, static_cast<int>(members.size()), excludeCount,
             (flags & NCCL_SHRINK_ABORT) != 0 ? ", parent's operations aborted" : "");
  const ncclUniqueId id = offer.id;
  return createAndInit(newcomm, std::move(ctx), static_cast<int>(members.size()), newRank,
                       [id](Communicator* c) { return c->runInit({id}); });
}

Status revoke(ncclComm_t comm, int flags) {
  Communicator* c = nullptr;
  FERRY_CHECK(managedComm(comm, "ncclCommRevoke", &c));
  if (flags != NCCL_REVOKE_DEFAULT) {
    FERRY_FAIL(ncclInvalidArgument, "ncclCommRevoke: revokeFlags = 0x%x must be 0", flags);
  }
  rt::DeviceScope device(c->runtime(), c->device());
  FERRY_CHECK(device.status());
  return c->revoke();
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                                     int excludeRanksCount, ncclComm_t* newcomm,
                                                     ncclConfig_t* config, int shrinkFlags) {
  return apiGuard(__func__, [&]() {
    return shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommShrink,
                  (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                   ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return apiGuard(__func__, [&]() { return revoke(comm, revokeFlags); });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
