#include "transport/setup.h"

#include <cstring>
#include <vector>

namespace ferry {
namespace {

// What a receiver publishes about the connection from one sender.
struct ConnInfo {
  uint32_t transport;
  uint32_t nslots;
  uint64_t chunkBytes;
  uint64_t ctrlBytes;
  uint64_t fifoLocalPtr;  // valid in the receiver's process only
  uint32_t fifoIpcType;
  uint32_t reserved;
  uint64_t fifoIpcSize;
  uint64_t fifoIpcOffset;
  uint8_t fifoIpc[64];
  char proxyName[112];
};
static_assert(std::is_trivially_copyable_v<ConnInfo>);

constexpr uint64_t kKindCtrl = 0;
constexpr uint64_t kKindFifo = 1;

uint64_t resourceKey(int sender, int receiver, uint64_t kind) {
  return (static_cast<uint64_t>(sender) << 33) | (static_cast<uint64_t>(receiver) << 1) | kind;
}

TransportId chooseTransport(const P2pSetupContext& ctx, int peer) {
  const Topology& t = *ctx.topology;
  if (t.links[peer] == PeerLink::OtherHost) return TransportId::None;
  bool p2pOff = ctx.params->getInt(ParamId::P2pDisable) != 0;
  bool shmOff = ctx.params->getInt(ParamId::ShmDisable) != 0;
  if (peer == t.myRank) return TransportId::P2p;  // self: always zero-copy, no FIFO
  if (ctx.runtime->kind() == rt::RuntimeKind::Host) {
    if (!p2pOff) return TransportId::P2p;
    return shmOff ? TransportId::None : TransportId::Shm;
  }
  bool peerAccess = false;
  if (!p2pOff) {
    int peerDevice = -1;
    if (ctx.runtime->deviceByBusId(t.peers[peer].busId, &peerDevice) == ncclSuccess) {
      (void)ctx.runtime->canAccessPeer(ctx.device, peerDevice, &peerAccess);
    }
  }
  if (peerAccess) return TransportId::P2p;
  return shmOff ? TransportId::None : TransportId::Shm;
}

Status makeCtrl(const P2pSetupContext& ctx, uint32_t nslots, uint64_t chunkBytes,
                CtrlMapping* out) {
  std::unique_ptr<SharedRegion> region;
  FERRY_CHECK(SharedRegion::create(sizeof(CtrlBlock), "ferry-ctrl", &region));
  out->region = std::move(region);
  out->ctrl = static_cast<CtrlBlock*>(out->region->data());
  out->ctrl->magic = kCtrlMagic;
  out->ctrl->version = kCtrlVersion;
  out->ctrl->nslots = nslots;
  out->ctrl->chunkBytes = chunkBytes;
  std::unique_ptr<rt::HostRegistration> reg;
  FERRY_CHECK(ctx.runtime->registerHost(out->region->data(), out->region->size(), &reg));
  out->registration = std::move(reg);
  return ncclSuccess;
}

// The receive side of peer -> me; fills `info` for the sender.
Status setupRecv(const P2pSetupContext& ctx, int peer, std::unique_ptr<RecvConnection>* out,
                 ConnInfo* info) {
  memset(info, 0, sizeof(*info));
  TransportId transport = chooseTransport(ctx, peer);
  info->transport = static_cast<uint32_t>(transport);
  if (transport == TransportId::None) return ncclSuccess;
  auto c = std::make_unique<RecvConnection>();
  const int me = ctx.topology->myRank;
  c->peer = peer;
  c->device = ctx.device;
  c->transport = transport;
  c->samePeerProcess = ctx.topology->links[peer] == PeerLink::SameProcess || peer == me;
  c->nslots = peer == me ? 0 : static_cast<uint32_t>(ctx.params->getInt(ParamId::P2pSlots));
  c->chunkBytes = static_cast<uint64_t>(ctx.params->getInt(ParamId::P2pChunkBytes));
  FERRY_CHECK(makeCtrl(ctx, c->nslots, c->chunkBytes, &c->ctrl));
  FERRY_CHECK(ctx.proxy->rpc().addResource(ctx.commKey, resourceKey(peer, me, kKindCtrl),
                                           c->ctrl.region->fd(), c->ctrl.region->size()));
  uint64_t fifoBytes = static_cast<uint64_t>(c->nslots) * c->chunkBytes;
  if (fifoBytes > 0 && transport == TransportId::P2p) {
    FERRY_CHECK(ctx.runtime->allocDevice(fifoBytes, &c->fifoDevice));
    c->fifo = static_cast<char*>(c->fifoDevice->ptr());
    rt::IpcDescriptor desc;
    FERRY_CHECK(ctx.runtime->exportIpc(*c->fifoDevice, &desc));
    UniqueFd fd(desc.fd);  // host runtime: offered through the RPC below
    info->fifoIpcType = static_cast<uint32_t>(desc.type);
    info->fifoIpcSize = desc.size;
    info->fifoIpcOffset = desc.offset;
    memcpy(info->fifoIpc, desc.bytes, sizeof(info->fifoIpc));
    if (fd) {
      FERRY_CHECK(ctx.proxy->rpc().addResource(ctx.commKey, resourceKey(peer, me, kKindFifo),
                                               fd.get(), desc.size));
    }
  } else if (fifoBytes > 0) {
    FERRY_CHECK(SharedRegion::create(fifoBytes, "ferry-fifo", &c->fifoShared));
    FERRY_CHECK(ctx.runtime->registerHost(c->fifoShared->data(), c->fifoShared->size(),
                                          &c->fifoRegistration));
    c->fifo = static_cast<char*>(c->fifoShared->data());
    FERRY_CHECK(ctx.proxy->rpc().addResource(ctx.commKey, resourceKey(peer, me, kKindFifo),
                                             c->fifoShared->fd(), c->fifoShared->size()));
  }
  info->nslots = c->nslots;
  info->chunkBytes = c->chunkBytes;
  info->ctrlBytes = c->ctrl.region->size();
  info->fifoLocalPtr = reinterpret_cast<uint64_t>(c->fifo);
  snprintf(info->proxyName, sizeof(info->proxyName), "%s", ctx.proxy->rpc().name().c_str());
  FERRY_CHECK(ctx.runtime->createStream(&c->stream));
  *out = std::move(c);
  return ncclSuccess;
}

Status mapPeerFifo(const P2pSetupContext& ctx, const ConnInfo& info, int peer, SendConnection* c) {
  const uint64_t fifoBytes = static_cast<uint64_t>(info.nslots) * info.chunkBytes;
  if (fifoBytes == 0) return ncclSuccess;
  const int me = ctx.topology->myRank;
  if (c->transport == TransportId::P2p && c->samePeerProcess) {
    c->peerFifo = reinterpret_cast<char*>(info.fifoLocalPtr);
    return ncclSuccess;
  }
  UniqueFd fd;
  uint64_t size = 0;
  bool needFd = c->transport == TransportId::Shm ||
                info.fifoIpcType == static_cast<uint32_t>(rt::IpcDescriptor::Type::HostMemfd);
  if (needFd) {
    FERRY_CHECK(c->rpc->fetch(RpcKind::Resource, ctx.commKey, resourceKey(me, peer, kKindFifo),
                              ctx.timeoutMs, ctx.abortFlag, &fd, &size));
  }
  if (c->transport == TransportId::Shm) {
    FERRY_CHECK(SharedRegion::attach(std::move(fd), fifoBytes, &c->fifoShared));
    FERRY_CHECK(ctx.runtime->registerHost(c->fifoShared->data(), c->fifoShared->size(),
                                          &c->fifoRegistration));
    c->peerFifo = static_cast<char*>(c->fifoShared->data());
    return ncclSuccess;
  }
  rt::IpcDescriptor desc;
  desc.type = static_cast<rt::IpcDescriptor::Type>(info.fifoIpcType);
  desc.size = info.fifoIpcSize;
  desc.offset = info.fifoIpcOffset;
  memcpy(desc.bytes, info.fifoIpc, sizeof(desc.bytes));
  desc.fd = fd.release();
  FERRY_CHECK(ctx.runtime->importIpc(desc, &c->fifoMapping));
  c->peerFifo = static_cast<char*>(c->fifoMapping->ptr());
  return ncclSuccess;
}

// The send side of me -> peer from the receiver's published info.
Status setupSend(const P2pSetupContext& ctx, int peer, const ConnInfo& info,
                 const RecvConnection* selfRecv, std::unique_ptr<SendConnection>* out) {
  auto transport = static_cast<TransportId>(info.transport);
  if (transport == TransportId::None) return ncclSuccess;
  auto c = std::make_unique<SendConnection>();
  const int me = ctx.topology->myRank;
  c->peer = peer;
  c->device = ctx.device;
  c->transport = transport;
  c->samePeerProcess = ctx.topology->links[peer] == PeerLink::SameProcess || peer == me;
  c->nslots = info.nslots;
  c->chunkBytes = info.chunkBytes;
  FERRY_CHECK(RpcClient::connect(info.proxyName, ctx.timeoutMs, ctx.abortFlag, &c->rpc));
  if (selfRecv != nullptr) {
    c->ctrl = selfRecv->ctrl;  // one mapping and registration for both sides
  } else {
    UniqueFd ctrlFd;
    uint64_t ctrlSize = 0;
    FERRY_CHECK(c->rpc->fetch(RpcKind::Resource, ctx.commKey, resourceKey(me, peer, kKindCtrl),
                              ctx.timeoutMs, ctx.abortFlag, &ctrlFd, &ctrlSize));
    std::unique_ptr<SharedRegion> region;
    FERRY_CHECK(SharedRegion::attach(std::move(ctrlFd), info.ctrlBytes, &region));
    c->ctrl.region = std::move(region);
    c->ctrl.ctrl = static_cast<CtrlBlock*>(c->ctrl.region->data());
    if (c->ctrl.ctrl->magic != kCtrlMagic || c->ctrl.ctrl->version != kCtrlVersion) {
      FERRY_FAIL(ncclRemoteError, "peer %d's control block is not a Ferry v%u block", peer,
                 kCtrlVersion);
    }
    std::unique_ptr<rt::HostRegistration> reg;
    FERRY_CHECK(ctx.runtime->registerHost(c->ctrl.region->data(), c->ctrl.region->size(), &reg));
    c->ctrl.registration = std::move(reg);
  }
  FERRY_CHECK(mapPeerFifo(ctx, info, peer, c.get()));
  if (!c->samePeerProcess) c->peerLink = c->rpc.get();
  FERRY_CHECK(ctx.runtime->createStream(&c->stream));
  FERRY_INFO(kLogP2p | kLogInit, "connection %d -> %d via %s%s, %u slots of %llu bytes", me, peer,
             transportName(transport), peer == me ? " (self, zero-copy)" : "", c->nslots,
             static_cast<unsigned long long>(c->chunkBytes));
  *out = std::move(c);
  return ncclSuccess;
}

}  // namespace

const char* transportName(TransportId id) {
  switch (id) {
    case TransportId::P2p:
      return "P2P/IPC SM-free FIFO";
    case TransportId::Shm:
      return "SHM SM-free FIFO";
    default:
      return "none";
  }
}

uint64_t* CtrlMapping::dev(CtrlWord& word) const {
  auto* base = static_cast<char*>(registration->hostPtr());
  auto* devBase = static_cast<char*>(registration->devicePtr());
  return reinterpret_cast<uint64_t*>(devBase + (reinterpret_cast<char*>(word.raw()) - base));
}

Status setupP2p(const P2pSetupContext& ctx, P2pState* out) {
  const int n = static_cast<int>(ctx.topology->peers.size());
  const int me = ctx.topology->myRank;
  out->send.resize(n);
  out->recv.resize(n);
  std::vector<ConnInfo> table(static_cast<size_t>(n) * n);
  for (int p = 0; p < n; ++p) {
    FERRY_CHECK(setupRecv(ctx, p, &out->recv[p], &table[static_cast<size_t>(me) * n + p]));
  }
  FERRY_CHECK(ctx.bootstrap->allGather(table.data(), sizeof(ConnInfo) * n));
  for (int q = 0; q < n; ++q) {
    const RecvConnection* self = q == me ? out->recv[me].get() : nullptr;
    FERRY_CHECK(setupSend(ctx, q, table[static_cast<size_t>(q) * n + me], self, &out->send[q]));
  }
  // Everyone has mapped what it needs: withdraw the offers.
  FERRY_CHECK(ctx.bootstrap->barrier());
  for (int p = 0; p < n; ++p) {
    ctx.proxy->rpc().removeResource(ctx.commKey, resourceKey(p, me, kKindCtrl));
    ctx.proxy->rpc().removeResource(ctx.commKey, resourceKey(p, me, kKindFifo));
    if (out->recv[p] && out->send[p]) out->recv[p]->peerLink = out->send[p]->peerLink;
  }
  return ncclSuccess;
}

}  // namespace ferry
