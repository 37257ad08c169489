#include "coll/ring_setup.h"

#include <cstring>

#include "core/log.h"
#include "transport/net_setup.h"

namespace ferry {
namespace {

// RPC keys of collective regions: bit 63 set, never a p2p key (those put the
// sender rank at bit 33 and up).
// Bits 61-62 tell the parts apart (ranks stay far below 2^30).
uint64_t regionKey(int owner, RingPart part) {
  return (1ULL << 63) | (static_cast<uint64_t>(part) << 61) | static_cast<uint64_t>(owner);
}

int resolveChannels(const RingSetupContext& ctx) {
  const int64_t v = ctx.params->getInt(ParamId::CollChannels);
  // CUDA: 64 x 256 KiB slots beat 32 x 512 KiB (same memory) by 11-17% on
  // large all-reduce/all-gather/reduce-scatter (2x H200, bench/RESULTS.md).
  // Across hosts the network is the bottleneck: a few channels (each one
  // engine connection per hop) fill it.
  const bool cuda = ctx.runtime->kind() == rt::RuntimeKind::Cuda;
  const int fallback = ctx.topology->nHosts > 1 ? (cuda ? 8 : 2) : (cuda ? 64 : 2);
  int n = fallback;
  if (v != 0 && (v < 1 || v > 64)) {
    FERRY_WARN("FERRY_COLL_CHANNELS=%ld out of range [1, 64]; using %d", static_cast<long>(v),
               fallback);
  } else if (v != 0) {
    n = static_cast<int>(v);
  }
  // ncclConfig_t.maxCTAs (NCCL_MAX_CTAS): the user's SM budget for us.
  if (ctx.maxCtas >= 1 && n > ctx.maxCtas) {
    FERRY_INFO(kLogInit | kLogColl, "collectives: %d channels (maxCTAs %d)", ctx.maxCtas,
               ctx.maxCtas);
    n = ctx.maxCtas;
  }
  return n;
}

Status resolveFifo(const RingSetupContext& ctx, RingResources* res) {
  const bool cuda = ctx.runtime->kind() == rt::RuntimeKind::Cuda;
  int64_t s = ctx.params->getInt(ParamId::CollSlots);
  int64_t b = ctx.params->getInt(ParamId::CollSlotBytes);
  int64_t ll = ctx.params->getInt(ParamId::CollLlSlotBytes);
  // Across hosts every slot is one network message: large ones amortize
  // the engine's per-message cost (1 MiB: 3.2x the all-reduce bandwidth of
  // 256 KiB on loopback sockets, bench/RESULTS.md session 11).
  const bool hosts = ctx.topology->nHosts > 1;
  if (b == 0) b = hosts ? (cuda ? 1 << 20 : 256 << 10) : (cuda ? 256 << 10 : 64 << 10);
  if (ll == 0) ll = cuda ? 32 << 10 : 4 << 10;
  if (s < 2 || s > 64 || s % 2 != 0) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_COLL_SLOTS=%ld: must be even, 2..64",
               static_cast<long>(s));
  }
  if (b < 1024 || b > (64LL << 20) || b % 16 != 0) {
    FERRY_FAIL(ncclInvalidArgument,
               "FERRY_COLL_SLOT_BYTES=%ld: must be a multiple of 16 in [1K, 64M]",
               static_cast<long>(b));
  }
  // Half of an LL slot is payload, in whole 16-byte units.
  if (ll < 1024 || ll > (16LL << 20) || ll % 32 != 0) {
    FERRY_FAIL(ncclInvalidArgument,
               "FERRY_COLL_LL_SLOT_BYTES=%ld: must be a multiple of 32 in [1K, 16M]",
               static_cast<long>(ll));
  }
  res->nslots = static_cast<uint32_t>(s);
  res->slotBytes = static_cast<uint64_t>(b);
  res->llSlotBytes = static_cast<uint64_t>(ll);
  return ncclSuccess;
}

// The peers part's FIFO (FERRY_P2P_FIFO_BYTES), apart from the collective
// rings': kernel p2p at 1-8 MiB needs a lane slot of ~256 KiB on 16 lanes
// to beat NVIDIA's NCCL (2x H200, bench/RESULTS.md session 25), four times
// what the rings' default gives. Same slot count as the rings.
Status resolvePeerFifo(const RingSetupContext& ctx, RingResources* res) {
  const bool cuda = ctx.runtime->kind() == rt::RuntimeKind::Cuda;
  int64_t f = ctx.params->getInt(ParamId::P2pFifoBytes);
  if (f == 0) {
    if (!cuda) return ncclSuccess;  // the collective FIFO's size
    f = 8LL << 20;
  }
  const int64_t unit = static_cast<int64_t>(res->nslots) * 16;
  if (f < (64LL << 10) || f > (1LL << 30) || f % unit != 0) {
    FERRY_FAIL(ncclInvalidArgument,
               "FERRY_P2P_FIFO_BYTES=%ld: must be a multiple of %ld (16 x FERRY_COLL_SLOTS) in "
               "[64K, 1G]",
               static_cast<long>(f), static_cast<long>(unit));
  }
  res->slotBytes = static_cast<uint64_t>(f) / res->nslots;
  return ncclSuccess;
}

// Kernel p2p lanes per peer: the knob (0: 16 on CUDA, 2 on the host runtime),
// halved until every (peer, direction, lane) block of a group fits the lane
// block budget and a lane's slot stays a multiple of 16 of at least 1 KiB.
// Each lane gets 1/lanes of the peer's FIFO, cut into `laneSlots` slots
// (FERRY_P2P_KERNEL_LANE_SLOTS; 0: the collective slot count). A function of
// the knobs and the rank count only: every rank must agree. For the peers
// part (`peers`) the LL FIFO grows past 2 lanes, so that a lane's LL slot
// still holds a whole FERRY_P2P_LL_LANE_BYTES part (at 16 lanes and the
// rings' LL size, 16-64 KiB messages took two slots a part: 1.06x NCCL
// instead of 1.25x, session 24), and a lane's part of a 512 KiB message
// (algo::kLlFifoLanes says why).
Status resolveLanes(const RingSetupContext& ctx, int nranks, bool peers, RingResources* res) {
  const bool cuda = ctx.runtime->kind() == rt::RuntimeKind::Cuda;
  int64_t lanes = ctx.params->getInt(ParamId::P2pKernelLanes);
  int64_t laneBytes = ctx.params->getInt(ParamId::P2pKernelLaneBytes);
  int64_t laneSlots = ctx.params->getInt(ParamId::P2pKernelLaneSlots);
  const int64_t llLaneBytes = ctx.params->getInt(ParamId::P2pLlLaneBytes);
  if (lanes == 0) {
    if (ctx.topology->nHosts > 1) {
      lanes = kKernelLanesAcrossHosts;
    } else {
      lanes = cuda ? algo::kDefaultKernelP2pLanes : 2;
    }
  }
  if (laneSlots == 0) laneSlots = res->nslots;
  if (lanes < 1 || lanes > algo::kMaxKernelP2pLanes || (lanes & (lanes - 1)) != 0) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_P2P_KERNEL_LANES=%ld: must be 0, 1, 2, 4, 8 or 16",
               static_cast<long>(lanes));
  }
  if (laneBytes < 1024) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_P2P_KERNEL_LANE_BYTES=%ld: must be at least 1K",
               static_cast<long>(laneBytes));
  }
  if (llLaneBytes < 1024 || llLaneBytes > (1LL << 30)) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_P2P_LL_LANE_BYTES=%ld: must be in [1K, 1G]",
               static_cast<long>(llLaneBytes));
  }
  if (laneSlots < 2 || laneSlots > 64 || laneSlots % 2 != 0) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_P2P_KERNEL_LANE_SLOTS=%ld: must be 0 or even, 2..64",
               static_cast<long>(laneSlots));
  }
  const uint64_t peerFifo = static_cast<uint64_t>(res->nslots) * res->slotBytes;
  auto laneSlotBytes = [&](int64_t l) {
    return peerFifo / static_cast<uint64_t>(l) / static_cast<uint64_t>(laneSlots);
  };
  // Slots of a multiple of 16 bytes, at least 1 KiB.
  auto slotsFit = [&](int64_t l) {
    return peerFifo % (static_cast<uint64_t>(l * laneSlots) * 16) == 0 && laneSlotBytes(l) >= 1024;
  };
  while (lanes > 1 && (2 * nranks * lanes > algo::kKernelP2pLaneBlockBudget || !slotsFit(lanes))) {
    lanes /= 2;
  }
  if (!slotsFit(lanes)) {
    FERRY_FAIL(ncclInvalidArgument,
               "FERRY_P2P_KERNEL_LANE_SLOTS=%ld: a peer FIFO of %llu bytes cannot be cut into "
               "that many slots of >= 1K (multiples of 16)",
               static_cast<long>(laneSlots), static_cast<unsigned long long>(peerFifo));
  }
  res->p2pLanes = static_cast<uint32_t>(lanes);
  res->p2pLaneBytes = static_cast<uint64_t>(laneBytes);
  res->p2pLaneSlots = static_cast<uint32_t>(laneSlots);
  res->p2pLaneSlotBytes = laneSlotBytes(lanes);
  if (peers && lanes > algo::kLlFifoLanes) {
    res->llSlotBytes *= static_cast<uint64_t>(lanes / algo::kLlFifoLanes);
  }
  // LL: two slots per lane (a part of up to llLaneBytes fits one when the
  // lane's share allows), whole 32-byte units (16 payload bytes).
  const uint64_t peerLlFifo = static_cast<uint64_t>(res->nslots) * res->llSlotBytes;
  res->p2pLlLaneBytes = static_cast<uint64_t>(llLaneBytes);
  res->p2pLlSlots = 2;
  res->p2pLlSlotBytes = p2pLlLaneShare(peerLlFifo, res->p2pLanes) / 2 / 32 * 32;
  return ncclSuccess;
}

// Whether some rank that writes into this rank's region (every same-host
// rank: ring neighbours and kernel-p2p peers) cannot reach its device memory.
bool useShm(const RingSetupContext& ctx) {
  if (ctx.params->getInt(ParamId::P2pDisable) != 0) return true;
  if (ctx.runtime->kind() == rt::RuntimeKind::Host) return false;
  const Topology& t = *ctx.topology;
  for (int peer = 0; peer < static_cast<int>(t.peers.size()); ++peer) {
    if (peer == t.myRank || t.links[peer] == PeerLink::OtherHost) continue;
    int peerDevice = -1;
    bool ok = false;
    if (ctx.runtime->deviceByBusId(t.peers[peer].busId, &peerDevice) == ncclSuccess) {
      (void)ctx.runtime->canAccessPeer(ctx.device, peerDevice, &ok);
    }
    if (!ok) return true;
  }
  return false;
}

}  // namespace

Status uploadSync(rt::Runtime* runtime, void* dst, const void* src, size_t bytes) {
  std::unique_ptr<rt::HostMemory> staging;
  FERRY_CHECK(runtime->allocHost(bytes, &staging));
  if (src != nullptr) {
    memcpy(staging->ptr(), src, bytes);
  } else {
    memset(staging->ptr(), 0, bytes);
  }
  std::unique_ptr<rt::Stream> s;
  FERRY_CHECK(runtime->createStream(&s));
  FERRY_CHECK(s->copyAsync(dst, staging->ptr(), bytes));
  return s->synchronize();
}

Status makeRegion(const RingSetupContext& ctx, uint64_t bytes, uint64_t zeroBytes, bool shm,
                  uint64_t key, RingRegion* r, RegionInfo* info, const RegionZeroer* zeroer) {
  memset(info, 0, sizeof(*info));
  info->shm = shm ? 1 : 0;
  info->bytes = bytes;
  snprintf(info->proxyName, sizeof(info->proxyName), "%s", ctx.proxy->rpc().name().c_str());
  // The blob travels with the fd (regions made on first use: the requester
  // learns the descriptor from the same reply).
  if (shm) {
    FERRY_CHECK(SharedRegion::create(bytes, "ferry-ring", &r->shared));  // zero-filled
    FERRY_CHECK(ctx.runtime->registerHost(r->shared->data(), r->shared->size(), &r->registration));
    r->base = static_cast<char*>(r->registration->devicePtr());
    info->localPtr = reinterpret_cast<uint64_t>(r->base);
    return ctx.proxy->rpc().addResource(ctx.commKey, key, r->shared->fd(), r->shared->size(), info,
                                        sizeof(*info));
  }
  FERRY_CHECK(ctx.runtime->allocDevice(bytes, &r->device));
  r->base = static_cast<char*>(r->device->ptr());
  // Only flags and LL lines need zeros (FIFO slots are written before they
  // are read).
  if (zeroer != nullptr) {
    FERRY_CHECK(zeroer->stream->copyAsync(r->base, zeroer->zeros, zeroBytes));
    FERRY_CHECK(zeroer->stream->synchronize());
  } else {
    FERRY_CHECK(uploadSync(ctx.runtime, r->base, nullptr, zeroBytes));
  }
  info->localPtr = reinterpret_cast<uint64_t>(r->base);
  rt::IpcDescriptor desc;
  FERRY_CHECK(ctx.runtime->exportIpc(*r->device, &desc));
  UniqueFd fd(desc.fd);
  info->ipcType = static_cast<uint32_t>(desc.type);
  info->ipcSize = desc.size;
  info->ipcOffset = desc.offset;
  memcpy(info->ipc, desc.bytes, sizeof(info->ipc));
  return ctx.proxy->rpc().addResource(ctx.commKey, key, fd.get(), desc.size, info, sizeof(*info));
}

bool regionNeedsFd(const RegionInfo& info) {
  return info.shm != 0 || info.ipcType == static_cast<uint32_t>(rt::IpcDescriptor::Type::HostMemfd);
}

Status mapRegion(const RingSetupContext& ctx, const RegionInfo& info, UniqueFd fd, RingRegion* r) {
  if (regionNeedsFd(info) && !fd) {
    FERRY_FAIL(ncclInternalError, "mapping a peer's region: no descriptor");
  }
  if (info.shm != 0) {
    FERRY_CHECK(SharedRegion::attach(std::move(fd), info.bytes, &r->shared));
    FERRY_CHECK(ctx.runtime->registerHost(r->shared->data(), r->shared->size(), &r->registration));
    r->base = static_cast<char*>(r->registration->devicePtr());
    return ncclSuccess;
  }
  rt::IpcDescriptor desc;
  desc.type = static_cast<rt::IpcDescriptor::Type>(info.ipcType);
  desc.size = info.ipcSize;
  desc.offset = info.ipcOffset;
  memcpy(desc.bytes, info.ipc, sizeof(desc.bytes));
  desc.fd = fd.release();
  FERRY_CHECK(ctx.runtime->importIpc(desc, &r->mapping));
  r->base = static_cast<char*>(r->mapping->ptr());
  return ncclSuccess;
}

namespace {

Status mapPeerRegion(const RingSetupContext& ctx, int owner, const RegionInfo& info, RingPart part,
                     RingRegion* r) {
  const Topology& t = *ctx.topology;
  bool sameProcess = t.links[owner] == PeerLink::SameProcess || owner == t.myRank;
  if (sameProcess) {  // CUDA forbids importing one's own legacy handle
    r->base = reinterpret_cast<char*>(info.localPtr);
    return ncclSuccess;
  }
  UniqueFd fd;
  uint64_t size = 0;
  if (regionNeedsFd(info)) {
    std::unique_ptr<RpcClient> rpc;
    FERRY_CHECK(RpcClient::connect(info.proxyName, ctx.timeoutMs, ctx.abortFlag, &rpc));
    FERRY_CHECK(rpc->fetch(RpcKind::Resource, ctx.commKey, regionKey(owner, part), ctx.timeoutMs,
                           ctx.abortFlag, &fd, &size));
  }
  return mapRegion(ctx, info, std::move(fd), r);
}

// Ring channel `conn` of a rank whose writes go to `next` and whose drains
// are acknowledged to `prev`; the peer side is the same channel of their
// regions.
algo::RingChannel connectionOf(const RingResources& res, int conn, char* own, char* prev,
                               char* next, uint64_t* sendSizes) {
  const int remoteConn = conn;
  const RingRegionLayout l = ringRegionLayout(res.nchannels, res.peerConns, res.p2pLanes,
                                              res.nslots, res.slotBytes, res.llSlotBytes);
  auto line = [](char* base, int c, int which) {
    return ringFlagLine(base, static_cast<uint64_t>(c), which);
  };
  auto fifo = [&](char* base, int c) { return base + l.fifos + c * l.fifoBytes; };
  algo::RingChannel c{};
  c.recvFifo = fifo(own, conn);
  c.sendFifo = fifo(next, remoteConn);
  c.recvTail = line(own, conn, 0);
  c.sendTail = line(next, remoteConn, 0);
  c.sendHead = line(own, conn, 1);
  c.recvHead = line(prev, remoteConn, 1);
  c.sendSizes =
      sendSizes != nullptr ? sendSizes + static_cast<uint64_t>(conn) * res.nslots : nullptr;
  // The LL connection of the channel.
  auto llFifo = [&](char* base, int c) { return base + l.llFifos + c * l.llFifoBytes; };
  c.llRecvFifo = llFifo(own, conn);
  c.llSendFifo = llFifo(next, remoteConn);
  c.llSendHead = line(own, conn, 2);
  c.llRecvHead = line(prev, remoteConn, 2);
  return c;
}

}  // namespace

algo::RingChannel peerLaneChannel(const RingResources& res, const PeerSide& own,
                                  const PeerSide& theirs, uint32_t lane) {
  const uint64_t fifoBytes = static_cast<uint64_t>(res.nslots) * res.slotBytes;
  const uint64_t llFifoBytes = static_cast<uint64_t>(res.nslots) * res.llSlotBytes;
  const uint64_t fifoShare = fifoBytes / res.p2pLanes;
  const uint64_t llShare = p2pLlLaneShare(llFifoBytes, res.p2pLanes);
  // A side without memory (a peer on another host: the caller puts its
  // mirror there) yields null pointers.
  auto line = [lane](char* lines, int which) {
    return lines != nullptr ? ringFlagLine(lines, lane, which) : nullptr;
  };
  auto at = [](char* base, uint64_t off) { return base != nullptr ? base + off : nullptr; };
  algo::RingChannel c{};
  c.recvFifo = at(own.fifo, lane * fifoShare);
  c.sendFifo = at(theirs.fifo, lane * fifoShare);
  c.recvTail = line(own.lines, 0);
  c.sendTail = line(theirs.lines, 0);
  c.sendHead = line(own.lines, 1);
  c.recvHead = line(theirs.lines, 1);
  // The lane's LL connection (small messages).
  c.llRecvFifo = at(own.llFifo, lane * llShare);
  c.llSendFifo = at(theirs.llFifo, lane * llShare);
  c.llSendHead = line(own.lines, 2);
  c.llRecvHead = line(theirs.lines, 2);
  return c;
}

namespace {

// Lane `lane` of this rank's kernel-p2p connection with peer q (`theirs`:
// q's region as mapped here, or null for a peer on another host, whose
// lanes use `mirror`). Our slots for q's sends are peer FIFO q of our
// region; our sends to q land in peer FIFO me of q's region.
algo::RingChannel peerLaneOf(const RingResources& res, int q, int me, uint32_t lane, char* own,
                             char* theirs, const PeerMirror* mirror) {
  const RingRegionLayout l = ringRegionLayout(res.nchannels, res.peerConns, res.p2pLanes,
                                              res.nslots, res.slotBytes, res.llSlotBytes);
  auto side = [&](char* base, int peer) {
    if (base == nullptr) return PeerSide{};
    const uint64_t conn = static_cast<uint64_t>(res.nchannels) + peer;
    const uint64_t firstLane =
        static_cast<uint64_t>(res.nchannels) + static_cast<uint64_t>(peer) * res.p2pLanes;
    return PeerSide{reinterpret_cast<char*>(ringFlagLine(base, firstLane, 0)),
                    base + l.llFifos + conn * l.llFifoBytes, base + l.fifos + conn * l.fifoBytes};
  };
  algo::RingChannel c = peerLaneChannel(res, side(own, q), side(theirs, me), lane);
  if (theirs == nullptr && mirror != nullptr) {
    // Across hosts: what the kernel writes for q lands in the mirror, which
    // the proxy's hops carry (no LL there: CollEngine never uses it).
    c.sendFifo = mirror->fifo + lane * (l.fifoBytes / res.p2pLanes);
    c.sendTail = ringFlagLine(mirror->flags, lane, 0);
    c.recvHead = ringFlagLine(mirror->flags, lane, 1);
    c.sendSizes = mirror->sizes + static_cast<uint64_t>(lane) * res.p2pLaneSlots;
    c.llSendFifo = nullptr;
    c.llRecvHead = ringFlagLine(mirror->flags, lane, 2);
  }
  return c;
}

Status copyTable(const RingSetupContext& ctx, const void* data, size_t bytes,
                 std::unique_ptr<rt::DeviceMemory>* out) {
  FERRY_CHECK(ctx.runtime->allocDevice(bytes, out));
  return uploadSync(ctx.runtime, (*out)->ptr(), data, bytes);
}

// Copies the channel table and ring order into executor-visible memory.
// prevBase / nextBase: the neighbours' regions as mapped here, or the
// mirrors standing in for neighbours on other hosts.
Status publishRingTables(const RingSetupContext& ctx, RingResources* res, char* prevBase,
                         char* nextBase) {
  std::vector<algo::RingChannel> table(res->nchannels);
  for (int h = 0; h < res->nchannels; ++h)
    table[h] = connectionOf(*res, h, res->own.base, prevBase, nextBase,
                            res->net ? res->net->sendSizes : nullptr);
  FERRY_CHECK(
      copyTable(ctx, table.data(), sizeof(algo::RingChannel) * table.size(), &res->channels));
  std::vector<int32_t> ring(ctx.topology->ringOrder.begin(), ctx.topology->ringOrder.end());
  return copyTable(ctx, ring.data(), sizeof(int32_t) * ring.size(), &res->ringRanks);
}

// Kernel p2p's table. Peer q's lanes: our slots for q's sends are peer FIFO
// q of our region, our sends to q land in peer FIFO me of q's region (lane
// l: slice l).
Status publishPeerTable(const RingSetupContext& ctx, RingResources* res) {
  const int n = res->nranks;
  const int me = ctx.topology->myRank;
  std::vector<algo::RingChannel> peers(static_cast<size_t>(n) * res->p2pLanes);
  for (int q = 0; q < n; ++q) {
    const PeerMirror* mirror = res->peerNet ? &res->peerNet->mirrors[q] : nullptr;
    if (res->regions[q].base == nullptr && (mirror == nullptr || mirror->fifo == nullptr)) {
      FERRY_FAIL(ncclInternalError, "kernel p2p: no connection to rank %d", q);
    }
    for (uint32_t lane = 0; lane < res->p2pLanes; ++lane) {
      peers[q * res->p2pLanes + lane] =
          peerLaneOf(*res, q, me, lane, res->own.base, res->regions[q].base, mirror);
    }
  }
  return copyTable(ctx, peers.data(), sizeof(algo::RingChannel) * peers.size(), &res->peerChannels);
}

}  // namespace

uint64_t p2pLlLaneShare(uint64_t peerLlFifoBytes, uint32_t lanes) {
  return peerLlFifoBytes / lanes / 32 * 32;
}

RingRegionLayout ringRegionLayout(int nchannels, int nranks, uint32_t lanes, uint32_t nslots,
                                  uint64_t slotBytes, uint64_t llSlotBytes) {
  const uint64_t nconn = static_cast<uint64_t>(nchannels) + static_cast<uint64_t>(nranks);
  const uint64_t nflags = static_cast<uint64_t>(nchannels) + static_cast<uint64_t>(nranks) * lanes;
  RingRegionLayout l;
  l.llFifos = algo::roundUp(nflags * 3 * kRingFlagLine, 4096);
  l.llFifoBytes = static_cast<uint64_t>(nslots) * llSlotBytes;
  l.fifos = algo::roundUp(l.llFifos + nconn * l.llFifoBytes, 4096);
  l.fifoBytes = static_cast<uint64_t>(nslots) * slotBytes;
  l.bytes = l.fifos + nconn * l.fifoBytes;
  return l;
}

namespace {

// Maps every rank's region this part needs: the peers part every same-host
// rank's (kernel p2p reaches any of them), a channels part only the ring
// neighbours' (the only regions a ring kernel touches).
Status mapRegions(const RingSetupContext& ctx, RingPart part, int prevRank, int nextRank,
                  const std::vector<RegionInfo>& infos, RingResources* res) {
  const Topology& t = *ctx.topology;
  const int n = res->nranks;
  res->allPeersReachable = part == RingPart::Peers;
  for (int q = 0; q < n; ++q) {
    if (t.links[q] == PeerLink::OtherHost) {
      res->allPeersReachable = false;  // unless the peer lanes cross hosts
    } else if (q != t.myRank && (part == RingPart::Peers || q == prevRank || q == nextRank)) {
      FERRY_CHECK(mapPeerRegion(ctx, q, infos[q], part, &res->regions[q]));
    }
  }
  return ncclSuccess;
}

void logPart(RingPart part, const RingResources& res, int prevRank, int nextRank) {
  if (part == RingPart::Peers) {
    FERRY_INFO(kLogInit | kLogP2p,
               "kernel p2p: %d connections x %u lanes via %s (%u slots of %llu bytes, LL %u of "
               "%llu), %.1f MiB",
               res.peerConns, res.p2pLanes, res.shm ? "SHM" : "P2P/IPC", res.p2pLaneSlots,
               static_cast<unsigned long long>(res.p2pLaneSlotBytes), res.p2pLlSlots,
               static_cast<unsigned long long>(res.p2pLlSlotBytes), res.regionBytes / 1048576.0);
    return;
  }
  const bool ll = part == RingPart::Ll;
  FERRY_INFO(kLogInit | kLogColl,
             "collectives: %s ring, position %d (prev rank %d, next rank %d) via %s, %d channels "
             "x %u slots of %llu bytes, %.1f MiB",
             ll ? "LL" : "Simple", res.pos, prevRank, nextRank, res.shm ? "SHM" : "P2P/IPC",
             res.nchannels, res.nslots,
             static_cast<unsigned long long>(ll ? res.llSlotBytes : res.slotBytes),
             res.regionBytes / 1048576.0);
}

}  // namespace

namespace {

// A part's shape from the knobs and the topology: sizes, lanes, this
// rank's ring position, and whether some same-host writer needs host
// memory (the caller adds its own reasons for SHM).
Status describePart(const RingSetupContext& ctx, RingPart part, RingResources* res) {
  const Topology& t = *ctx.topology;
  const int n = static_cast<int>(t.peers.size());
  const bool peers = part == RingPart::Peers;
  res->nranks = n;
  res->peerConns = peers ? n : 0;
  res->ringOrder = t.ringOrder;
  res->nchannels = peers ? 0 : resolveChannels(ctx);
  FERRY_CHECK(resolveFifo(ctx, res));
  if (peers) FERRY_CHECK(resolvePeerFifo(ctx, res));
  FERRY_CHECK(resolveLanes(ctx, n, peers, res));
  // A protocol's part has no FIFOs of the other (peers: both).
  if (part == RingPart::Ll) res->slotBytes = 0;
  if (part == RingPart::Simple) res->llSlotBytes = 0;
  for (int i = 0; i < n; ++i) {
    if (t.ringOrder[i] == t.myRank) res->pos = i;
  }
  res->shm = useShm(ctx);
  return ncclSuccess;
}

}  // namespace

Status describePeers(const RingSetupContext& ctx, RingResources* res) {
  return describePart(ctx, RingPart::Peers, res);
}

Status setupRing(const RingSetupContext& ctx, RingPart part, RingResources* out) {
  const Topology& t = *ctx.topology;
  const int n = static_cast<int>(t.peers.size());
  RingResources& res = *out;
  const bool peers = part == RingPart::Peers;
  if (peers && ctx.collectivesOnly) return ncclSuccess;
  const bool peersAcross = peers && t.nHosts > 1;
  if (peersAcross) {
    int lanes = 0;
    FERRY_CHECK(kernelLanesAcrossHosts(*ctx.params, n, &lanes));
    if (lanes == 0) return ncclSuccess;
  }
  FERRY_CHECK(describePart(ctx, part, &res));
  const int prevRank = t.ringOrder[(res.pos + n - 1) % n];
  const int nextRank = t.ringOrder[(res.pos + 1) % n];
  // Both protocols' rings cross hosts (LL: its kernel posts a tail where a
  // hop carries its sends, algo/coll_ll.h).
  const bool remoteHop = !peers && (t.links[prevRank] == PeerLink::OtherHost ||
                                    t.links[nextRank] == PeerLink::OtherHost);
  // The proxy writes this rank's flags (and, from a remote previous rank,
  // its FIFO): host memory then.
  res.shm = res.shm || remoteHop || peersAcross;
  const RingRegionLayout layout = ringRegionLayout(res.nchannels, res.peerConns, res.p2pLanes,
                                                   res.nslots, res.slotBytes, res.llSlotBytes);
  res.regionBytes = layout.bytes;
  res.collectiveFifoBytes =
      static_cast<uint64_t>(res.nchannels) * (layout.fifoBytes + layout.llFifoBytes);
  std::vector<RegionInfo> infos(n);
  FERRY_CHECK(makeRegion(ctx, layout.bytes, layout.fifos, res.shm, regionKey(t.myRank, part),
                         &res.own, &infos[t.myRank]));
  res.regions.resize(n);
  res.regions[t.myRank].base = res.own.base;
  if (n > 1) FERRY_CHECK(ctx.bootstrap->allGather(infos.data(), sizeof(RegionInfo)));
  FERRY_CHECK(mapRegions(ctx, part, prevRank, nextRank, infos, &res));
  if (n > 1) FERRY_CHECK(ctx.bootstrap->barrier());  // everyone mapped: withdraw the offer
  ctx.proxy->rpc().removeResource(ctx.commKey, regionKey(t.myRank, part));
  if (peersAcross) {
    res.peerNet = std::make_unique<PeerNet>();
    PeerNetShape shape{res.p2pLanes, res.p2pLaneSlots, res.p2pLaneSlotBytes};
    FERRY_CHECK(setupPeerNet(ctx, shape, layout, static_cast<char*>(res.own.shared->data()),
                             res.peerNet.get()));
    if (res.peerNet->hops.empty()) {
      FERRY_INFO(kLogInit, "kernel p2p: no network engine for the peers on other hosts");
      res = RingResources();
      return ncclSuccess;
    }
    res.allPeersReachable = true;
  }
  if (peers) {
    FERRY_CHECK(publishPeerTable(ctx, &res));
    logPart(part, res, prevRank, nextRank);
    return ncclSuccess;
  }
  char* prevBase = res.regions[prevRank].base;
  char* nextBase = res.regions[nextRank].base;
  if (t.nHosts > 1) {
    const bool ll = part == RingPart::Ll;
    res.net = std::make_unique<RingNet>();
    char* ownCpu = res.shm ? static_cast<char*>(res.own.shared->data()) : res.own.base;
    FERRY_CHECK(setupRingNet(ctx, ll, res.nchannels, res.nslots,
                             ll ? res.llSlotBytes : res.slotBytes, layout, prevRank, nextRank,
                             ownCpu, res.net.get(), &prevBase, &nextBase));
    if (remoteHop && res.net->hops.empty()) {
      FERRY_INFO(kLogInit, "collectives: no network engine for the ring across hosts");
      res = RingResources();
      return ncclSuccess;
    }
  }
  FERRY_CHECK(publishRingTables(ctx, &res, prevBase, nextBase));
  logPart(part, res, prevRank, nextRank);
  return ncclSuccess;
}

}  // namespace ferry
