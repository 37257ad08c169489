#include "transport/net_setup.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "net/net_registry.h"
#include "net/socket_net.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Pause between two passes over connections that all said "not yet".
constexpr auto kIdleWait = std::chrono::microseconds(500);

Status makeNetConnection(const P2pSetupContext& ctx, net::NetEngine* engine, int peer,
                         ConnectionBase* c) {
  c->peer = peer;
  c->device = ctx.device;
  c->transport = TransportId::Net;
  c->samePeerProcess = false;
  c->net = std::make_unique<NetLink>(engine, netDevFor(engine, *ctx.topology, peer), c->isSend);
  c->netBuffers = std::make_unique<NetBuffers>(ctx.runtime, c->net.get());
  FERRY_CHECK(c->netBuffers->init());
  // The copies between the user's buffer and the connection's host memory
  // (enqueue/p2p_net.cc).
  FERRY_CHECK(ctx.runtime->createStream(&c->stream));
  return ncclSuccess;
}

// One non-blocking step of c's connect or accept; *done once c has its comm.
Status stepOne(ConnectionBase& c, std::vector<NetHandle>& handles, bool* done) {
  NetLink& link = *c.net;
  void* comm = nullptr;
  if (c.isSend) {
    FERRY_CHECK(link.engine->connect(link.dev, handles[c.peer].data(), &comm));
  } else {
    FERRY_CHECK(link.engine->accept(link.listenComm, &comm));
  }
  *done = comm != nullptr;
  if (!*done) return ncclSuccess;
  link.comm = comm;
  link.closeListen();  // a receiver's listener has served its one connection
  return ncclSuccess;
}

std::string describePending(const std::vector<ConnectionBase*>& pending) {
  std::string sends, recvs;
  for (const ConnectionBase* c : pending)
    (c->isSend ? sends : recvs) += " " + std::to_string(c->peer);
  std::string out;
  if (!sends.empty()) out += "connect to peer(s)" + sends;
  if (!sends.empty() && !recvs.empty()) out += ", ";
  if (!recvs.empty()) out += "accept from peer(s)" + recvs;
  return out;
}

void logConnected(const ConnectionBase& c, int me) {
  const char* name = transportName(TransportId::Net);
  if (c.isSend) {
    FERRY_INFO(kLogNet | kLogInit, "connection %d -> %d via %s/%d", me, c.peer, name, c.net->dev);
  } else {
    FERRY_INFO(kLogNet | kLogInit, "connection %d -> %d via %s/%d [receive]", c.peer, me, name,
               c.net->dev);
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

// The built-in socket engine opens, per peer on another host, a send and a
// receive connection of 1 control + threads x sockets data streams + an
// eventfd per thread each, plus a listener until the receive connection is
// accepted, all at init.
// A rank with hundreds of such peers passes a default `ulimit -n` (1024),
// and the failure would otherwise surface as an obscure socket error
// midway through the connections: raise the soft limit towards the hard
// one when that covers it, else say what is needed and how to lower it.

void checkNetDescriptorBudget(const P2pSetupContext& ctx, net::NetEngine* engine) {
  if (engine == nullptr || strcmp(engine->name(), "Socket") != 0) return;
  const Topology& t = *ctx.topology;
  const int myRank = t.myRank;
  const long remotePeers = std::count(t.links.begin(), t.links.end(), PeerLink::OtherHost);
  const net::SocketNetLayout layout = net::resolveSocketNetLayout(*ctx.params);
  const long perPeer = 2L * (1 + layout.nThreads * (layout.nSocksPerThread + 1)) + 1;
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
      "2 connections x (1 + NCCL_SOCKET_NTHREADS %d x (NCCL_NSOCKS_PERTHREAD %d + 1)) + "
      "a listener), %ld are open, and the limit is %llu (hard %llu): raise `ulimit -n` or "
      "lower those two knobs, or the connections will fail",
      myRank, remotePeers, remotePeers * perPeer, perPeer, layout.nThreads, layout.nSocksPerThread,
      open, static_cast<unsigned long long>(lim.rlim_cur),
      static_cast<unsigned long long>(lim.rlim_max));
}

int netDevFor(net::NetEngine* engine, const Topology& t, int spread) {
  int count = 0;
  if (engine->devices(&count) != ncclSuccess || count <= 1) return 0;
  const int local = std::max(t.localRank, 0);
  return (spread % count + local % count) % count;
}

Status netEngineFor(const P2pSetupContext& ctx, net::NetEngine** out) {
  *out = nullptr;
  const Topology& t = *ctx.topology;
  const auto remote = std::count(t.links.begin(), t.links.end(), PeerLink::OtherHost);
  if (remote == 0) return ncclSuccess;
  Status s = processNetEngine(*ctx.params, out);
  if (ok(s)) return ncclSuccess;
  *out = nullptr;
  // A name or knob that does not exist is the user's to fix: init fails
  // (on every rank that has peers on other hosts, so none waits for it).
  if (s == ncclInvalidArgument) FERRY_CHECK(s);
  FERRY_WARN("rank %d: no network engine (%s): its %ld peer(s) on other hosts get no transport",
             t.myRank, statusString(s), static_cast<long>(remote));
  return ncclSuccess;
}

Status setupNetRecv(const P2pSetupContext& ctx, net::NetEngine* engine, int peer,
                    std::unique_ptr<RecvConnection>* out, NetHandle* handle) {
  auto c = std::make_unique<RecvConnection>();
  FERRY_CHECK(makeNetConnection(ctx, engine, peer, c.get()));
  handle->fill(0);
  FERRY_CHECK(engine->listen(c->net->dev, handle->data(), &c->net->listenComm));
  *out = std::move(c);
  return ncclSuccess;
}

Status setupNetSend(const P2pSetupContext& ctx, net::NetEngine* engine, int peer,
                    std::unique_ptr<SendConnection>* out) {
  auto c = std::make_unique<SendConnection>();
  FERRY_CHECK(makeNetConnection(ctx, engine, peer, c.get()));
  *out = std::move(c);
  return ncclSuccess;
}

Status connectNetPeers(const P2pSetupContext& ctx, std::vector<NetHandle>& handles,
                       P2pState* state) {
  std::vector<ConnectionBase*> pending;
  for (auto& c : state->send) {
    if (c && c->transport == TransportId::Net) pending.push_back(c.get());
  }
  for (auto& c : state->recv) {
    if (c && c->transport == TransportId::Net) pending.push_back(c.get());
  }
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
      Status s = stepOne(*pending[i], handles, &done);
      if (!ok(s)) {
        FERRY_FAIL(s, "rank %d: network connection %s peer %d failed: %s", me,
                   pending[i]->isSend ? "to" : "from", pending[i]->peer, statusString(s));
      }
      if (!done) {
        ++i;
        continue;
      }
      logConnected(*pending[i], me);
      pending.erase(pending.begin() + static_cast<long>(i));
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
  FERRY_INFO(kLogNet | kLogInit, "rank %d: %zu network connections up in %.1f ms", me, total,
             std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  return ncclSuccess;
}

}  // namespace ferry
