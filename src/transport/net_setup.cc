#include "transport/net_setup.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "core/log.h"
#include "net/net_registry.h"
#include "net/socket_net.h"
#include "topo/pci_locality.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Pause between two passes over connections that all said "not yet".
constexpr auto kIdleWait = std::chrono::microseconds(500);

// Bootstrap tag of the extra links' listen handles (above the split tags,
// communicator.h).
constexpr uint32_t kNetHandleTag = 0x4e455448;  // "NETH"

Status makeNetConnection(const P2pSetupContext& ctx, net::NetEngine* engine, int peer, int links,
                         ConnectionBase* c) {
  c->peer = peer;
  c->device = ctx.device;
  c->transport = TransportId::Net;
  c->samePeerProcess = false;
  std::vector<NetLink*> raw;
  for (int k = 0; k < links; ++k) {
    // Links spread over the engine's devices (NICs) like a ring's channels.
    c->net.push_back(
        std::make_unique<NetLink>(engine, netDevFor(engine, *ctx.topology, peer + k), c->isSend));
    raw.push_back(c->net.back().get());
  }
  c->netBuffers = std::make_unique<NetBuffers>(ctx.runtime, std::move(raw), c->isSend, ctx.netPool);
  FERRY_CHECK(c->netBuffers->init());
  // The copies between the user's buffer and the connection's host memory
  // (enqueue/p2p_net.cc).
  FERRY_CHECK(ctx.runtime->createStream(&c->stream));
  return ncclSuccess;
}

// One link of a connection that is not connected yet.
struct PendingLink {
  ConnectionBase* conn = nullptr;
  int link = 0;
};

// One non-blocking step of a link's connect or accept; *done once it has its comm.
Status stepOne(const PendingLink& p, int links, std::vector<NetHandle>& handles, bool* done) {
  NetLink& link = *p.conn->net[p.link];
  void* comm = nullptr;
  if (p.conn->isSend) {
    const size_t at = static_cast<size_t>(p.conn->peer) * links + p.link;
    FERRY_CHECK(link.engine->connect(link.dev, handles[at].data(), &comm));
  } else {
    FERRY_CHECK(link.engine->accept(link.listenComm, &comm));
  }
  *done = comm != nullptr;
  if (!*done) return ncclSuccess;
  link.comm = comm;
  link.closeListen();  // a receiver's listener has served its one connection
  return ncclSuccess;
}

std::string describePending(const std::vector<PendingLink>& pending) {
  std::string sends, recvs;
  for (const PendingLink& p : pending) {
    (p.conn->isSend ? sends : recvs) +=
        " " + std::to_string(p.conn->peer) + "/" + std::to_string(p.link);
  }
  std::string out;
  if (!sends.empty()) out += "connect to peer/link" + sends;
  if (!sends.empty() && !recvs.empty()) out += ", ";
  if (!recvs.empty()) out += "accept from peer/link" + recvs;
  return out;
}

// Once per connection, when its last link is up.
// "/GDRDMA" (as NCCL says it) where messages go between the user's buffers
// and the network directly (FERRY_NET_GDR=1 and an engine that takes
// device memory); else " (host-staged)": the bytes go through pinned host
// memory and no GPU memory is registered with the engine.
void logConnected(const ConnectionBase& c, int me, bool gdr) {
  for (const auto& link : c.net) {
    if (link->comm == nullptr) return;
  }
  const char* name = transportName(TransportId::Net);
  char striped[32] = "";
  if (c.net.size() > 1) snprintf(striped, sizeof(striped), " x%zu links", c.net.size());
  const bool direct = gdr && c.netBuffers != nullptr && c.netBuffers->directCapable();
  const char* memory = direct ? "/GDRDMA" : " (host-staged)";
  if (c.isSend) {
    FERRY_INFO(kLogNet | kLogInit, "connection %d -> %d via %s/%d%s%s", me, c.peer, name,
               c.net[0]->dev, memory, striped);
  } else {
    FERRY_INFO(kLogNet | kLogInit, "connection %d -> %d via %s/%d%s [receive]%s", c.peer, me, name,
               c.net[0]->dev, memory, striped);
  }
}

// Descriptors open in this process now (-1: unknown).
long openDescriptors() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  long n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

}  // namespace

// Kernel p2p across hosts costs two network connections per lane and
// remote peer and a FIFO mirror per remote peer, made at init (a pairwise
// handshake on first use would need both ranks' threads, NOTES Open 5).
// NCCL_PASS_SM=0 needs them for every message; send/recv captured into a
// CUDA graph needs them too (the SM-free path cannot be captured). So they
// are made where asked, and by default (-1) on communicators of at most
// kAutoKernelLanesRanks ranks: pipeline-parallel groups, whose send/recv is
// what programs capture, at a bounded cost; the count is the same on every
// rank, so all choose alike.
Status kernelLanesAcrossHosts(const Params& params, int nranks, int* lanes) {
  const int64_t v = params.getInt(ParamId::P2pKernelAcrossHosts);
  if (v < -1 || v > 1) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_P2P_KERNEL_ACROSS_HOSTS=%ld: must be -1 (auto), 0 or 1",
               static_cast<long>(v));
  }
  const bool made =
      params.getInt(ParamId::PassSm) == 0 || v == 1 || (v == -1 && nranks <= kAutoKernelLanesRanks);
  const int64_t knob = params.getInt(ParamId::P2pKernelLanes);
  *lanes = !made ? 0 : knob > 0 ? static_cast<int>(knob) : kKernelLanesAcrossHosts;
  return ncclSuccess;
}

// The built-in socket engine opens, per peer on another host, a send and a
// receive connection of 1 control + threads x sockets data streams + an
// eventfd per thread each, plus a listener until the receive connection is
// accepted, all at init.
// A rank with hundreds of such peers passes a default `ulimit -n` (1024),
// and the failure would otherwise surface as an obscure socket error
// midway through the connections: raise the soft limit towards the hard
// one when that covers it, else say what is needed and how to lower it.

void checkNetDescriptorBudget(const P2pSetupContext& ctx, net::NetEngine* engine, int links,
                              int kernelLanes) {
  if (engine == nullptr || strcmp(engine->name(), "Socket") != 0) return;
  const Topology& t = *ctx.topology;
  const int myRank = t.myRank;
  const long remotePeers = std::count(t.links.begin(), t.links.end(), PeerLink::OtherHost);
  const net::SocketNetLayout layout = net::resolveSocketNetLayout(*ctx.params);
  // A send and a receive connection per link and per kernel p2p lane.
  const long perPeer =
      (links + kernelLanes) * (2L * (1 + layout.nThreads * (layout.nSocksPerThread + 1)) + 1);
  const long open = openDescriptors();
  rlimit lim{};
  if (open < 0 || getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  constexpr long kMargin = 64;  // the bootstrap, liveness, ring hops, the user's own
  const long need = open + remotePeers * perPeer + kMargin;
  if (lim.rlim_cur == RLIM_INFINITY || static_cast<long>(lim.rlim_cur) >= need) return;
  const long hard = lim.rlim_max == RLIM_INFINITY ? need : static_cast<long>(lim.rlim_max);
  if (hard >= need) {
    rlimit raised = lim;
    raised.rlim_cur = static_cast<rlim_t>(need);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      FERRY_INFO(kLogNet | kLogInit,
                 "rank %d: raised the open-file limit from %llu to %ld for %ld network peers "
                 "(%ld descriptors each)",
                 myRank, static_cast<unsigned long long>(lim.rlim_cur), need, remotePeers, perPeer);
      return;
    }
  }
  FERRY_WARN(
      "rank %d: %ld peers on other hosts need about %ld more file descriptors (%ld each: "
      "(FERRY_NET_LINKS %d + kernel p2p lanes %d, FERRY_P2P_KERNEL_ACROSS_HOSTS) x (2 "
      "connections x (1 + NCCL_SOCKET_NTHREADS %d x (NCCL_NSOCKS_PERTHREAD %d + 1)) + a "
      "listener)), %ld are open, and the limit is %llu (hard %llu): raise `ulimit -n` or lower "
      "those knobs, or the connections will fail",
      myRank, remotePeers, remotePeers * perPeer, perPeer, links, kernelLanes, layout.nThreads,
      layout.nSocksPerThread, open, static_cast<unsigned long long>(lim.rlim_cur),
      static_cast<unsigned long long>(lim.rlim_max));
}

std::vector<int> nearNetDevices(net::NetEngine* engine, const Topology& t, int count) {
  std::vector<std::string> nics(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    net::NetProperties p;
    if (engine->properties(d, &p) == ncclSuccess) nics[d] = p.pciPath;
  }
  std::string gpu;
  if (t.myRank >= 0 && static_cast<size_t>(t.myRank) < t.peers.size()) {
    gpu = pciSysfsPath(t.peers[t.myRank].busId);
  }
  std::vector<int> near = nearestNetDevices(gpu, nics);
  if (near.size() < nics.size()) {
    std::string list;
    for (int d : near) list += " " + std::to_string(d);
    // Said once per process: every connection of every communicator asks.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      FERRY_INFO(kLogInit | kLogNet, "rank %d: NET/%s device(s)%s of %d nearest to GPU %s (%s)",
                 t.myRank, engine->name(), list.c_str(), count, t.peers[t.myRank].busId,
                 gpu.c_str());
    }
  }
  return near;
}

int netDevFor(net::NetEngine* engine, const Topology& t, int spread) {
  int count = 0;
  if (engine->devices(&count) != ncclSuccess || count <= 1) return 0;
  const std::vector<int> near = nearNetDevices(engine, t, count);
  const int n = static_cast<int>(near.size());
  const int local = std::max(t.localRank, 0);
  return near[(spread % n + local % n) % n];
}

Status netEngineFor(const P2pSetupContext& ctx, net::NetEngine** out) {
  *out = nullptr;
  const Topology& t = *ctx.topology;
  const auto remote = std::count(t.links.begin(), t.links.end(), PeerLink::OtherHost);
  if (remote == 0) return ncclSuccess;
  Status s = processNetEngine(*ctx.params, t.localProcesses, out);
  if (ok(s)) return ncclSuccess;
  *out = nullptr;
  // A name or knob that does not exist is the user's to fix: init fails
  // (on every rank that has peers on other hosts, so none waits for it).
  if (s == ncclInvalidArgument) FERRY_CHECK(s);
  FERRY_WARN("rank %d: no network engine (%s): its %ld peer(s) on other hosts get no transport",
             t.myRank, statusString(s), static_cast<long>(remote));
  return ncclSuccess;
}

Status netLinksPerPeer(const P2pSetupContext& ctx, int* out) {
  const int64_t v = ctx.params->getInt(ParamId::NetLinks);
  if (v < 0 || v > kMaxNetLinks) {
    FERRY_FAIL(ncclInvalidArgument, "FERRY_NET_LINKS=%lld is outside [0, %d]",
               static_cast<long long>(v), kMaxNetLinks);
  }
  if (v > 0) {
    *out = static_cast<int>(v);
  } else {
    *out = ctx.runtime->kind() == rt::RuntimeKind::Host ? 1 : 2;
  }
  return ncclSuccess;
}

Status setupNetRecv(const P2pSetupContext& ctx, net::NetEngine* engine, int peer, int links,
                    std::unique_ptr<RecvConnection>* out, std::vector<NetHandle>* handles) {
  auto c = std::make_unique<RecvConnection>();
  FERRY_CHECK(makeNetConnection(ctx, engine, peer, links, c.get()));
  handles->assign(static_cast<size_t>(links), NetHandle{});
  for (int k = 0; k < links; ++k) {
    NetLink& link = *c->net[k];
    FERRY_CHECK(engine->listen(link.dev, (*handles)[k].data(), &link.listenComm));
  }
  *out = std::move(c);
  return ncclSuccess;
}

Status setupNetSend(const P2pSetupContext& ctx, net::NetEngine* engine, int peer, int links,
                    std::unique_ptr<SendConnection>* out) {
  auto c = std::make_unique<SendConnection>();
  FERRY_CHECK(makeNetConnection(ctx, engine, peer, links, c.get()));
  *out = std::move(c);
  return ncclSuccess;
}

Status exchangeNetHandles(const P2pSetupContext& ctx, int links,
                          const std::vector<std::vector<NetHandle>>& recvExtra,
                          const P2pState& state, std::vector<NetHandle>* sendHandles) {
  if (links <= 1) return ncclSuccess;
  const size_t bytes = sizeof(NetHandle) * static_cast<size_t>(links - 1);
  const int n = static_cast<int>(state.recv.size());
  // Sends first: a bootstrap send never waits for its receive (bootstrap.h).
  for (int p = 0; p < n; ++p) {
    const auto& c = state.recv[p];
    if (!c || c->transport != TransportId::Net) continue;
    FERRY_CHECK(ctx.bootstrap->send(p, kNetHandleTag, recvExtra[p].data(), bytes));
  }
  for (int q = 0; q < n; ++q) {
    const auto& c = state.send[q];
    if (!c || c->transport != TransportId::Net) continue;
    const size_t at = static_cast<size_t>(q) * links + 1;
    FERRY_CHECK(ctx.bootstrap->recv(q, kNetHandleTag, (*sendHandles)[at].data(), bytes));
  }
  return ncclSuccess;
}

Status connectNetPeers(const P2pSetupContext& ctx, int links, std::vector<NetHandle>& handles,
                       P2pState* state) {
  std::vector<PendingLink> pending;
  auto addLinks = [&pending](ConnectionBase* c) {
    if (c == nullptr || c->transport != TransportId::Net) return;
    for (int k = 0; k < static_cast<int>(c->net.size()); ++k) pending.push_back(PendingLink{c, k});
  };
  for (auto& c : state->send) addLinks(c.get());
  for (auto& c : state->recv) addLinks(c.get());
  if (pending.empty()) return ncclSuccess;
  const int me = ctx.topology->myRank;
  const size_t total = pending.size();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::milliseconds(std::max<int64_t>(ctx.timeoutMs, 0));
  for (;;) {
    bool completed = false;
    for (size_t i = 0; i < pending.size();) {
      bool done = false;
      const PendingLink p = pending[i];
      Status s = stepOne(p, links, handles, &done);
      if (!ok(s)) {
        FERRY_FAIL(s, "rank %d: network connection %s peer %d (link %d) failed: %s", me,
                   p.conn->isSend ? "to" : "from", p.conn->peer, p.link, statusString(s));
      }
      if (!done) {
        ++i;
        continue;
      }
      pending.erase(pending.begin() + static_cast<long>(i));
      logConnected(*p.conn, me, ctx.params != nullptr && ctx.params->getInt(ParamId::NetGdr) != 0);
      completed = true;
    }
    if (pending.empty()) break;
    // Acquire: pairs with the release store of whoever aborts.
    if (ctx.abortFlag != nullptr && ctx.abortFlag->load(std::memory_order_acquire)) {
      FERRY_FAIL(ncclInternalError, "rank %d: aborted while establishing network connections (%s)",
                 me, describePending(pending).c_str());
    }
    if (Clock::now() > deadline) {
      FERRY_FAIL(ncclSystemError,
                 "rank %d: network connections not established within %lld ms "
                 "(FERRY_BOOTSTRAP_TIMEOUT); still pending: %s",
                 me, static_cast<long long>(ctx.timeoutMs), describePending(pending).c_str());
    }
    if (!completed) std::this_thread::sleep_for(kIdleWait);
  }
  FERRY_INFO(kLogNet | kLogInit, "rank %d: %zu network links up in %.1f ms", me, total,
             std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  return ncclSuccess;
}

}  // namespace ferry
