#include "transport/setup.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "net/net_registry.h"
#include "transport/net_setup.h"

namespace ferry {
namespace {

// What a receiver publishes about the connection from one sender. Every
// rank all-gathers an n x n table of these (256 bytes each: 256 MiB per
// rank at 1,024 ranks), which grows with n^2: a known scaling debt, to be
// replaced by per-peer exchanges (NCCL connects lazily, per peer).
struct ConnInfo {
  uint32_t transport;
  uint32_t reserved;
  uint64_t ctrlBytes;
  char proxyName[112];
  char netHandle[net::kNetHandleBytes];  // TransportId::Net: the receiver's listen handle
};
static_assert(std::is_trivially_copyable_v<ConnInfo>);
static_assert(sizeof(NetHandle) == sizeof(ConnInfo::netHandle));

constexpr uint64_t kKindCtrl = 0;

uint64_t resourceKey(int sender, int receiver, uint64_t kind) {
  return (static_cast<uint64_t>(sender) << 33) | (static_cast<uint64_t>(receiver) << 1) | kind;
}

// `engine`: the network engine for peers on other hosts (null: none).
TransportId chooseTransport(const P2pSetupContext& ctx, net::NetEngine* engine, int peer) {
  const Topology& t = *ctx.topology;
  if (t.links[peer] == PeerLink::OtherHost) return engine ? TransportId::Net : TransportId::None;
  bool p2pOff = ctx.params->getInt(ParamId::P2pDisable) != 0;
  bool shmOff = ctx.params->getInt(ParamId::ShmDisable) != 0;
  if (peer == t.myRank) return TransportId::P2p;  // self: always direct
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

Status makeCtrl(const P2pSetupContext& ctx, CtrlMapping* out) {
  std::unique_ptr<SharedRegion> region;
  FERRY_CHECK(SharedRegion::create(sizeof(CtrlBlock), "ferry-ctrl", &region));
  out->region = std::move(region);
  out->ctrl = static_cast<CtrlBlock*>(out->region->data());
  out->ctrl->magic = kCtrlMagic;
  out->ctrl->version = kCtrlVersion;
  out->ctrl->slots = kMsgSlots;
  std::unique_ptr<rt::HostRegistration> reg;
  FERRY_CHECK(ctx.runtime->registerHost(out->region->data(), out->region->size(), &reg));
  out->registration = std::move(reg);
  return ncclSuccess;
}

// The receive side of peer -> me; fills `info` for the sender.
// Net: `links` links; *extraHandles gets the listen handles of links 1.. .
Status setupRecv(const P2pSetupContext& ctx, net::NetEngine* engine, int links, int peer,
                 std::unique_ptr<RecvConnection>* out, ConnInfo* info,
                 std::vector<NetHandle>* extraHandles) {
  memset(info, 0, sizeof(*info));
  TransportId transport = chooseTransport(ctx, engine, peer);
  info->transport = static_cast<uint32_t>(transport);
  snprintf(info->proxyName, sizeof(info->proxyName), "%s", ctx.proxy->rpc().name().c_str());
  if (transport == TransportId::None) return ncclSuccess;
  if (transport == TransportId::Net) {
    std::vector<NetHandle> handles;
    FERRY_CHECK(setupNetRecv(ctx, engine, peer, links, out, &handles));
    memcpy(info->netHandle, handles[0].data(), sizeof(NetHandle));
    extraHandles->assign(handles.begin() + 1, handles.end());
    return ncclSuccess;
  }
  auto c = std::make_unique<RecvConnection>();
  const int me = ctx.topology->myRank;
  c->peer = peer;
  c->device = ctx.device;
  c->transport = transport;
  c->samePeerProcess = ctx.topology->links[peer] == PeerLink::SameProcess || peer == me;
  FERRY_CHECK(makeCtrl(ctx, &c->ctrl));
  FERRY_CHECK(ctx.proxy->rpc().addResource(ctx.commKey, resourceKey(peer, me, kKindCtrl),
                                           c->ctrl.region->fd(), c->ctrl.region->size()));
  info->ctrlBytes = c->ctrl.region->size();
  FERRY_CHECK(ctx.runtime->createStream(&c->stream));
  *out = std::move(c);
  return ncclSuccess;
}

Status attachCtrl(const P2pSetupContext& ctx, int peer, const ConnInfo& info, SendConnection* c) {
  const int me = ctx.topology->myRank;
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
  return ncclSuccess;
}

const char* connectionNote(const SendConnection& c, int me) {
  if (c.peer == me) return " (self)";
  if (c.samePeerProcess) return " (same process)";
  return c.transport == TransportId::Shm ? " (through host shared memory)" : "";
}

// The send side of me -> peer from the receiver's published info (`mine`:
// what this rank published for peer -> me).
Status setupSend(const P2pSetupContext& ctx, net::NetEngine* engine, int links, int peer,
                 const ConnInfo& info, const ConnInfo& mine, const RecvConnection* selfRecv,
                 std::unique_ptr<SendConnection>* out) {
  auto transport = static_cast<TransportId>(info.transport);
  if (transport == TransportId::None) return ncclSuccess;
  if (transport == TransportId::Net) {
    // Both directions or neither: without an engine here (mine says None)
    // the peer drops its listener for us too (setupP2p).
    if (static_cast<TransportId>(mine.transport) != TransportId::Net) return ncclSuccess;
    return setupNetSend(ctx, engine, peer, links, out);
  }
  auto c = std::make_unique<SendConnection>();
  const int me = ctx.topology->myRank;
  c->peer = peer;
  c->device = ctx.device;
  c->transport = transport;
  c->samePeerProcess = ctx.topology->links[peer] == PeerLink::SameProcess || peer == me;
  c->peerProxy = info.proxyName;
  FERRY_CHECK(RpcClient::connect(info.proxyName, ctx.timeoutMs, ctx.abortFlag, &c->rpc));
  FERRY_CHECK(RpcClient::connect(info.proxyName, ctx.timeoutMs, ctx.abortFlag, &c->userRpc));
  if (selfRecv != nullptr) {
    c->ctrl = selfRecv->ctrl;  // one mapping and registration for both sides
  } else {
    FERRY_CHECK(attachCtrl(ctx, peer, info, c.get()));
  }
  if (!c->samePeerProcess) c->peerLink = c->rpc.get();
  FERRY_CHECK(ctx.runtime->createStream(&c->stream));
  FERRY_INFO(kLogP2p | kLogInit, "connection %d -> %d via %s%s", me, peer, transportName(transport),
             connectionNote(*c, me));
  *out = std::move(c);
  return ncclSuccess;
}

}  // namespace

const char* transportName(TransportId id) {
  switch (id) {
    case TransportId::P2p:
      return "P2P/IPC SM-free copy engines";
    case TransportId::Shm:
      return "SHM SM-free copy engines";
    case TransportId::Net:
      return processNetTransportName();
    default:
      return "none";
  }
}

const char* netStopName(NetStop s) {
  switch (s) {
    case NetStop::Window:
      return "window full";
    case NetStop::Engine:
      return "engine busy";
    case NetStop::NoMessage:
      return "no message";
    case NetStop::Unstaged:
      return "not staged";
    case NetStop::BlockBusy:
      return "block busy";
    case NetStop::NotReady:
      return "not ready";
    default:
      return "?";
  }
}

std::string describeNetStats(const NetStats& s, bool isSend) {
  // Relaxed loads: statistics, read once the proxy is done with them.
  const uint64_t posts = s.posts.load(std::memory_order_relaxed);
  if (posts == 0) return "";
  std::string out = " net links:";
  char part[96];
  const char* sep = " ";
  for (size_t i = 0; i < static_cast<size_t>(NetStop::kCount); ++i) {
    const uint64_t ns = s.stopNs[i].load(std::memory_order_relaxed);
    if (ns == 0) continue;
    snprintf(part, sizeof(part), "%s%s %.1f ms", sep, netStopName(static_cast<NetStop>(i)),
             static_cast<double>(ns) / 1e6);
    out += part;
    sep = ", ";
  }
  snprintf(part, sizeof(part), "; %llu chunks posted", static_cast<unsigned long long>(posts));
  out += part;
  if (isSend) {
    snprintf(part, sizeof(part), ", staged ahead avg %.1f max %llu",
             static_cast<double>(s.aheadSum.load(std::memory_order_relaxed)) /
                 static_cast<double>(posts),
             static_cast<unsigned long long>(s.aheadMax.load(std::memory_order_relaxed)));
    out += part;
  }
  const uint64_t msgs = s.messages.load(std::memory_order_relaxed);
  if (msgs > 0) {
    const auto avgUs = [](const std::atomic<uint64_t>& ns, uint64_t n) {
      return n == 0 ? 0.0
                    : static_cast<double>(ns.load(std::memory_order_relaxed)) / 1e3 /
                          static_cast<double>(n);
    };
    // Every message but the connection's first has a previous one.
    char timeline[160];
    snprintf(timeline, sizeof(timeline),
             "; %llu messages, avg us: first chunk out %.1f, wire %.1f, gap after the "
             "previous %.1f",
             static_cast<unsigned long long>(msgs), avgUs(s.firstOutNs, msgs),
             avgUs(s.wireNs, msgs), avgUs(s.gapNs, msgs - 1));
    out += timeline;
  }
  return out;
}

uint64_t* CtrlMapping::dev(CtrlWord& word) const {
  auto* base = static_cast<char*>(registration->hostPtr());
  auto* devBase = static_cast<char*>(registration->devicePtr());
  return reinterpret_cast<uint64_t*>(devBase + (reinterpret_cast<char*>(word.raw()) - base));
}

Status setupP2p(const P2pSetupContext& given, P2pState* out) {
  P2pSetupContext ctx = given;
  out->netPool = std::make_unique<NetBlockPool>(ctx.runtime);
  ctx.netPool = out->netPool.get();
  const int n = static_cast<int>(ctx.topology->peers.size());
  const int me = ctx.topology->myRank;
  net::NetEngine* engine = nullptr;
  FERRY_CHECK(netEngineFor(ctx, &engine));
  // Per network connection (net_setup.h); checked on every rank, with
  // peers on other hosts or not, so a bad value fails all of them here
  // rather than some in the all-gather below.
  int links = 1;
  FERRY_CHECK(netLinksPerPeer(ctx, &links));
  // Kernel p2p's lanes across hosts count against the descriptors too.
  int kernelLanes = 0;
  FERRY_CHECK(kernelLanesAcrossHosts(*ctx.params, n, &kernelLanes));
  checkNetDescriptorBudget(ctx, engine, links, kernelLanes);
  out->send.resize(n);
  out->recv.resize(n);
  std::vector<ConnInfo> table(static_cast<size_t>(n) * n);
  auto at = [&table, n](int receiver, int sender) -> ConnInfo& {
    return table[static_cast<size_t>(receiver) * n + sender];
  };
  std::vector<std::vector<NetHandle>> extraHandles(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    FERRY_CHECK(setupRecv(ctx, engine, links, p, &out->recv[p], &at(me, p), &extraHandles[p]));
  }
  FERRY_CHECK(ctx.bootstrap->allGather(table.data(), sizeof(ConnInfo) * n));
  // Writable copies of the receivers' listen handles (peer q's link k at
  // q * links + k), kept until every connect has completed (net_setup.h).
  std::vector<NetHandle> netHandles(static_cast<size_t>(n) * links);
  for (int q = 0; q < n; ++q) {
    const RecvConnection* self = q == me ? out->recv[me].get() : nullptr;
    FERRY_CHECK(setupSend(ctx, engine, links, q, at(q, me), at(me, q), self, &out->send[q]));
    memcpy(netHandles[static_cast<size_t>(q) * links].data(), at(q, me).netHandle,
           sizeof(NetHandle));
  }
  for (int p = 0; p < n; ++p) {
    // A peer without a network engine never connects: drop our listener.
    if (out->recv[p] && out->recv[p]->transport == TransportId::Net &&
        static_cast<TransportId>(at(p, me).transport) != TransportId::Net) {
      out->recv[p].reset();
    }
  }
  FERRY_CHECK(exchangeNetHandles(ctx, links, extraHandles, *out, &netHandles));
  FERRY_CHECK(connectNetPeers(ctx, links, netHandles, out));
  // Everyone has mapped what it needs: withdraw the offers.
  FERRY_CHECK(ctx.bootstrap->barrier());
  for (int p = 0; p < n; ++p) {
    ctx.proxy->rpc().removeResource(ctx.commKey, resourceKey(p, me, kKindCtrl));
    // Net: the peer's proxy is on another host, out of the RPC's reach.
    if (!out->recv[p] || out->recv[p]->transport == TransportId::Net) continue;
    out->recv[p]->peerProxy = table[static_cast<size_t>(p) * n + me].proxyName;
    if (out->send[p]) out->recv[p]->peerLink = out->send[p]->peerLink;
  }
  return ncclSuccess;
}

}  // namespace ferry
