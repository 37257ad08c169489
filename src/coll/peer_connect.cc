#include "coll/peer_connect.h"

#include <cstring>

#include "core/log.h"
#include "runtime/device_scope.h"

namespace ferry {

PeerConnector::~PeerConnector() {
  if (providerId_ != 0) ctx_.proxy->rpc().removeProvider(providerId_);
  for (int p = 0; p < static_cast<int>(own_.size()); ++p) {
    if (own_[p]) ctx_.proxy->rpc().removeResource(ctx_.commKey, chunkKey(me_, p));
  }
}

// Bit 63 and part 3 (regionKey in ring_setup.cc uses parts 0-2), the owner
// at bit 30, the peer below (ranks stay far below 2^30).
uint64_t PeerConnector::chunkKey(int owner, int peer) const {
  return (1ULL << 63) | (3ULL << 61) | (static_cast<uint64_t>(owner) << 30) |
         static_cast<uint64_t>(peer);
}

Status PeerConnector::create(const RingSetupContext& ctx,
                             const std::vector<std::string>& proxyNames, RingResources* res,
                             std::unique_ptr<PeerConnector>* out) {
  std::unique_ptr<PeerConnector> c(new PeerConnector());
  c->ctx_ = ctx;
  c->res_ = res;
  c->me_ = ctx.topology->myRank;
  const int n = res->nranks;
  if (proxyNames.size() != static_cast<size_t>(n)) {
    FERRY_FAIL(ncclInternalError, "kernel p2p: %zu proxy names for %d ranks", proxyNames.size(), n);
  }
  c->proxyNames_ = proxyNames;
  // The same sizes as one peer's share of the init-time region.
  c->layout_ = ringRegionLayout(0, 1, res->p2pLanes, res->nslots, res->slotBytes, res->llSlotBytes);
  c->own_.resize(n);
  c->theirs_.resize(n);
  c->connected_.assign(n, 0);
  FERRY_CHECK(ctx.runtime->createStream(&c->zeroStream_));
  FERRY_CHECK(ctx.runtime->createStream(&c->rowStream_));
  FERRY_CHECK(ctx.runtime->allocHost(c->layout_.fifos, &c->zeros_));
  memset(c->zeros_->ptr(), 0, c->layout_.fifos);
  FERRY_CHECK(ctx.runtime->allocHost(sizeof(algo::RingChannel) * res->p2pLanes, &c->rows_));
  // The kernel's peer table, zeroed: rows are written as peers connect.
  const size_t table = sizeof(algo::RingChannel) * static_cast<size_t>(n) * res->p2pLanes;
  FERRY_CHECK(ctx.runtime->allocDevice(table, &res->peerChannels));
  FERRY_CHECK(uploadSync(ctx.runtime, res->peerChannels->ptr(), nullptr, table));
  res->allPeersReachable = true;
  res->regionBytes = 0;
  PeerConnector* raw = c.get();
  c->providerId_ =
      ctx.proxy->rpc().addProvider(ctx.commKey, [raw](uint64_t b) { raw->provide(b); });
  FERRY_INFO(kLogInit | kLogP2p,
             "kernel p2p: connections on first use per peer, %u lanes via %s (%u slots of %llu "
             "bytes, LL %u of %llu), %.2f MiB per peer (NCCL_RUNTIME_CONNECT=0: all at init)",
             res->p2pLanes, res->shm ? "SHM" : "P2P/IPC", res->p2pLaneSlots,
             static_cast<unsigned long long>(res->p2pLaneSlotBytes), res->p2pLlSlots,
             static_cast<unsigned long long>(res->p2pLlSlotBytes), c->layout_.bytes / 1048576.0);
  *out = std::move(c);
  return ncclSuccess;
}

Status PeerConnector::ownChunk(int peer, Chunk** out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!own_[peer]) {
    auto chunk = std::make_unique<Chunk>();
    const RegionZeroer zeroer{zeroStream_.get(), zeros_->ptr()};
    FERRY_CHECK(makeRegion(ctx_, layout_.bytes, layout_.fifos, res_->shm, chunkKey(me_, peer),
                           &chunk->region, &chunk->info, &zeroer));
    own_[peer] = std::move(chunk);
    held_.fetch_add(layout_.bytes, std::memory_order_relaxed);
  }
  *out = own_[peer].get();
  return ncclSuccess;
}

void PeerConnector::provide(uint64_t b) {
  const uint64_t mask = (1ULL << 30) - 1;
  if ((b >> 61) != 7 || ((b >> 30) & mask) != static_cast<uint64_t>(me_)) return;
  const uint64_t peer = b & mask;
  if (peer >= own_.size()) return;  // a stranger's key: the request is refused
  // The proxy thread serves every device of the process.
  rt::DeviceScope scope(ctx_.runtime, ctx_.device);
  rt::RelaxedCaptureScope relaxed(ctx_.runtime);
  Chunk* chunk = nullptr;
  Status s = scope.status();
  if (s == ncclSuccess) s = ownChunk(static_cast<int>(peer), &chunk);
  if (s != ncclSuccess) {
    FERRY_WARN("kernel p2p: could not make rank %d's connection for rank %llu: %s", me_,
               static_cast<unsigned long long>(peer), statusString(s));
  }
}

PeerSide PeerConnector::sideOf(char* base) const {
  return PeerSide{base, base + layout_.llFifos, base + layout_.fifos};
}

Status PeerConnector::connect(int peer) {
  Chunk* mine = nullptr;
  FERRY_CHECK(ownChunk(peer, &mine));
  char* theirs = mine->region.base;  // self: the one chunk is both sides
  if (peer != me_) {
    if (proxyNames_[peer].empty()) {
      FERRY_FAIL(ncclInternalError, "kernel p2p: no proxy known for rank %d", peer);
    }
    std::unique_ptr<RpcClient> rpc;
    FERRY_CHECK(RpcClient::connect(proxyNames_[peer], ctx_.timeoutMs, ctx_.abortFlag, &rpc));
    UniqueFd fd;
    uint64_t size = 0;
    std::vector<uint8_t> blob;
    const Status got = rpc->fetch(RpcKind::Resource, ctx_.commKey, chunkKey(peer, me_),
                                  ctx_.timeoutMs, ctx_.abortFlag, &fd, &size, &blob);
    if (got != ncclSuccess) {
      FERRY_FAIL(got == ncclInvalidArgument ? ncclRemoteError : got,
                 "kernel p2p: rank %d did not hand out its connection for rank %d (%s): its "
                 "communicator is destroyed, or it failed to make it (see its log)",
                 peer, me_, statusString(got));
    }
    RegionInfo info{};
    if (blob.size() != sizeof(info)) {
      FERRY_FAIL(ncclRemoteError, "kernel p2p: rank %d described its connection in %zu bytes", peer,
                 blob.size());
    }
    memcpy(&info, blob.data(), sizeof(info));
    if (info.bytes != layout_.bytes) {
      FERRY_FAIL(ncclInvalidUsage,
                 "kernel p2p: rank %d's connection has %llu bytes, this rank expects %llu (the "
                 "FIFO and lane knobs differ between ranks)",
                 peer, static_cast<unsigned long long>(info.bytes),
                 static_cast<unsigned long long>(layout_.bytes));
    }
    FERRY_CHECK(mapRegion(ctx_, info, std::move(fd), &theirs_[peer]));
    theirs = theirs_[peer].base;
  }
  const uint32_t lanes = res_->p2pLanes;
  auto* rows = static_cast<algo::RingChannel*>(rows_->ptr());
  for (uint32_t lane = 0; lane < lanes; ++lane) {
    rows[lane] = peerLaneChannel(*res_, sideOf(mine->region.base), sideOf(theirs), lane);
  }
  // The rows are written (and the copy waited for) before any kernel that
  // reads them is launched; no running kernel reads this peer's rows. The
  // stream is non-blocking: the wait covers this copy only.
  auto* table = static_cast<algo::RingChannel*>(res_->peerChannels->ptr());
  FERRY_CHECK(rowStream_->copyAsync(table + static_cast<size_t>(peer) * lanes, rows,
                                    sizeof(algo::RingChannel) * lanes));
  FERRY_CHECK(rowStream_->synchronize());
  FERRY_INFO(kLogP2p, "kernel p2p: connected to rank %d on first use (%.2f MiB held here)", peer,
             layout_.bytes / 1048576.0);
  return ncclSuccess;
}

Status PeerConnector::connectFirst(int peer) {
  // Setup may run while a graph capture is under way (it touches no
  // captured stream).
  rt::RelaxedCaptureScope relaxed(ctx_.runtime);
  FERRY_CHECK(connect(peer));
  connected_[peer] = 1;
  return ncclSuccess;
}

}  // namespace ferry
