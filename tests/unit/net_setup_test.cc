// Network connections at init (transport/net_setup.h) against a scripted
// engine: connectNetPeers drives every pending connect and accept of a rank
// in one loop until all are done, closes each listener once its connection
// is accepted, gives up at the deadline naming the peers still pending,
// stops on abort, and passes an engine failure on; NetLink closes what it
// holds through the engine. Also the process engine registry's refusal of
// an NCCL_NET that names nothing.
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/null_net_engine.h"
#include "core/log.h"
#include "core/params.h"
#include "net/net_registry.h"
#include "transport/net_setup.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// connect/accept answer "not yet" a scripted number of times per comm
// (-1: forever), then hand out a comm; every close is counted.
class ScriptedEngine final : public NullNetEngine {
 public:
  int connectAfter = 2;
  int acceptAfter = 3;
  Status connectFails = ncclSuccess;
  std::map<std::string, int> calls;

  const char* name() const override { return "Scripted"; }
  Status listen(int, void* handle, void** listenComm) override {
    ++calls["listen"];
    *listenComm = newToken();
    static_cast<char*>(handle)[0] = 'h';
    return ncclSuccess;
  }
  Status connect(int, void* handle, void** sendComm) override {
    ++calls["connect"];
    *sendComm = nullptr;
    if (connectFails != ncclSuccess) return connectFails;
    // Progress lives in the caller's handle buffer, as plugins keep it.
    char& tries = static_cast<char*>(handle)[1];
    if (connectAfter < 0 || tries++ < connectAfter) return ncclSuccess;
    *sendComm = newToken();
    return ncclSuccess;
  }
  Status accept(void* listenComm, void** recvComm) override {
    ++calls["accept"];
    *recvComm = nullptr;
    int& tries = acceptTries_[listenComm];
    if (acceptAfter < 0 || tries++ < acceptAfter) return ncclSuccess;
    *recvComm = newToken();
    return ncclSuccess;
  }
  Status closeSend(void*) override { return count("closeSend"); }
  Status closeRecv(void*) override { return count("closeRecv"); }
  Status closeListen(void*) override { return count("closeListen"); }

 private:
  Status count(const char* what) {
    ++calls[what];
    return ncclSuccess;
  }
  // A fresh address per comm (a deque never moves its elements).
  void* newToken() { return &tokens_.emplace_back(static_cast<int>(tokens_.size())); }
  std::deque<int> tokens_;
  std::map<void*, int> acceptTries_;
};

// A rank (0) with Net connections of `links` links to and from `peers`,
// each receive link listening on its own comm, as setupP2p leaves them.
struct Rank {
  Rank(ScriptedEngine* engine, const std::vector<int>& peers, int nranks, int nlinks = 1)
      : links(nlinks), handles(static_cast<size_t>(nranks) * nlinks) {
    topology.myRank = 0;
    ctx.topology = &topology;
    ctx.abortFlag = &abort;
    ctx.timeoutMs = 5000;
    state.send.resize(nranks);
    state.recv.resize(nranks);
    for (int p : peers) {
      auto s = std::make_unique<SendConnection>();
      s->peer = p;
      s->transport = TransportId::Net;
      auto r = std::make_unique<RecvConnection>();
      r->peer = p;
      r->transport = TransportId::Net;
      for (int k = 0; k < links; ++k) {
        s->net.push_back(std::make_unique<NetLink>(engine, 0, true));
        r->net.push_back(std::make_unique<NetLink>(engine, 0, false));
        void** listen = &r->net.back()->listenComm;
        EXPECT_EQ(engine->listen(0, handles[p * links + k].data(), listen), ncclSuccess);
      }
      state.send[p] = std::move(s);
      state.recv[p] = std::move(r);
    }
  }
  Topology topology;
  P2pSetupContext ctx;
  std::atomic<bool> abort{false};
  int links;
  std::vector<NetHandle> handles;
  P2pState state;
};

TEST(NetSetup, ConnectsEveryPeerAndClosesListeners) {
  ScriptedEngine engine;
  {
    Rank rank(&engine, {1, 2, 3}, 4);
    ASSERT_EQ(connectNetPeers(rank.ctx, rank.links, rank.handles, &rank.state), ncclSuccess);
    for (int p = 1; p < 4; ++p) {
      EXPECT_NE(rank.state.send[p]->net[0]->comm, nullptr) << p;
      EXPECT_NE(rank.state.recv[p]->net[0]->comm, nullptr) << p;
      EXPECT_EQ(rank.state.recv[p]->net[0]->listenComm, nullptr) << p;
    }
    // Every connection retried in the same loop, not one after another.
    EXPECT_EQ(engine.calls["connect"], 3 * (engine.connectAfter + 1));
    EXPECT_EQ(engine.calls["accept"], 3 * (engine.acceptAfter + 1));
    EXPECT_EQ(engine.calls["closeListen"], 3);
    EXPECT_EQ(engine.calls["closeSend"], 0);
  }
  // The connections' NetLinks closed their comms through the engine.
  EXPECT_EQ(engine.calls["closeSend"], 3);
  EXPECT_EQ(engine.calls["closeRecv"], 3);
}

TEST(NetSetup, TimesOutNamingThePendingPeers) {
  ScriptedEngine engine;
  engine.acceptAfter = -1;  // nobody ever connects to us
  {
    Rank rank(&engine, {2, 5}, 6);
    rank.ctx.timeoutMs = 100;
    auto start = Clock::now();
    EXPECT_EQ(connectNetPeers(rank.ctx, rank.links, rank.handles, &rank.state), ncclSystemError);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
    const std::string why = lastWarning();
    EXPECT_NE(why.find("accept from peer/link 2/0 5/0"), std::string::npos) << why;
    EXPECT_EQ(why.find("connect to"), std::string::npos) << why;  // those completed
  }
  // The listeners that never accepted were closed with their connections.
  EXPECT_EQ(engine.calls["closeListen"], 2);
  EXPECT_EQ(engine.calls["closeRecv"], 0);
  EXPECT_EQ(engine.calls["closeSend"], 2);
}

TEST(NetSetup, StopsOnAbort) {
  ScriptedEngine engine;
  engine.connectAfter = -1;
  Rank rank(&engine, {1}, 2);
  rank.abort.store(true);
  auto start = Clock::now();
  EXPECT_EQ(connectNetPeers(rank.ctx, rank.links, rank.handles, &rank.state), ncclInternalError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_NE(lastWarning().find("aborted"), std::string::npos) << lastWarning();
}

TEST(NetSetup, PassesEngineFailuresOn) {
  ScriptedEngine engine;
  engine.connectFails = ncclSystemError;
  Rank rank(&engine, {1}, 2);
  EXPECT_EQ(connectNetPeers(rank.ctx, rank.links, rank.handles, &rank.state), ncclSystemError);
  EXPECT_NE(lastWarning().find("network connection to peer 1 (link 0) failed"), std::string::npos)
      << lastWarning();
}

TEST(NetSetup, NothingToDoWithoutNetConnections) {
  ScriptedEngine engine;
  Rank rank(&engine, {}, 3);
  EXPECT_EQ(connectNetPeers(rank.ctx, rank.links, rank.handles, &rank.state), ncclSuccess);
  EXPECT_TRUE(engine.calls.empty());
}

// Striped connections: every link of every connection connects (each with
// its own receiver's handle) and closes on its own.
TEST(NetSetup, ConnectsEveryLinkOfEveryConnection) {
  ScriptedEngine engine;
  {
    Rank rank(&engine, {1, 3}, 4, 3);
    ASSERT_EQ(connectNetPeers(rank.ctx, rank.links, rank.handles, &rank.state), ncclSuccess);
    for (int p : {1, 3}) {
      ASSERT_EQ(rank.state.send[p]->net.size(), 3u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_NE(rank.state.send[p]->net[k]->comm, nullptr) << p << "/" << k;
        EXPECT_NE(rank.state.recv[p]->net[k]->comm, nullptr) << p << "/" << k;
        EXPECT_EQ(rank.state.recv[p]->net[k]->listenComm, nullptr) << p << "/" << k;
      }
      // Three distinct comms per side.
      EXPECT_NE(rank.state.send[p]->net[0]->comm, rank.state.send[p]->net[1]->comm);
      EXPECT_NE(rank.state.send[p]->net[1]->comm, rank.state.send[p]->net[2]->comm);
    }
    EXPECT_EQ(engine.calls["closeListen"], 6);
  }
  EXPECT_EQ(engine.calls["closeSend"], 6);
  EXPECT_EQ(engine.calls["closeRecv"], 6);
}

TEST(NetRegistry, RefusesAnNcclNetThatNamesNothing) {
  Params params = Params::fromValues({{"NCCL_NET", "Bogus"}, {"NCCL_NET_PLUGIN", "none"}});
  net::NetEngine* engine = reinterpret_cast<net::NetEngine*>(1);
  EXPECT_EQ(processNetEngine(params, 1, &engine), ncclInvalidArgument);
  EXPECT_EQ(engine, nullptr);
  const std::string why = lastWarning();
  EXPECT_NE(why.find("NCCL_NET=Bogus"), std::string::npos) << why;
  EXPECT_NE(why.find("Socket (built-in)"), std::string::npos) << why;
  EXPECT_STREQ(processNetTransportName(), "NET");  // nothing was created
}

}  // namespace
}  // namespace ferry
