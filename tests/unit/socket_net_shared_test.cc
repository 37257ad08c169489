// The socket engine's shared helper threads (FERRY_NET_SHARED_HELPERS): many
// connections each way served by fewer threads than they have socket groups,
// sleeping or spinning; comms closing and opening while others move data;
// one comm failing while its threads keep serving the others; the knob's
// bad values. Every byte is checked against fresh random data, every wait
// is bounded.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/proc.h"
#include "common/random.h"
#include "core/log.h"
#include "core/params.h"
#include "net/socket_net.h"
#include "unit/socket_net_util.h"

namespace ferry::net {
namespace {

using namespace socktest;  // NOLINT: the shared helpers of these tests

SocketNetTuning shared(int threads, int64_t spinUs) {
  SocketNetTuning t;
  t.sharedHelpers = threads;
  t.helperSpinUs = spinUs;
  return t;
}

// One message in flight on a link: source, poisoned destination, requests.
struct Msg {
  Link* link = nullptr;
  std::vector<uint8_t> src, dst;
  void* sreq = nullptr;
  void* rreq = nullptr;
};

// Posts a message of random size (inline, one chunk or many) on each link,
// several per link, then waits for all of them in random order and checks
// every byte.
void burst(std::vector<Link*>& links, int perLink, test::Rng& rng) {
  std::vector<Msg> msgs;
  msgs.reserve(links.size() * static_cast<size_t>(perLink));
  for (int i = 0; i < perLink; ++i) {
    for (Link* l : links) {
      Msg m;
      m.link = l;
      const uint64_t pick = rng.below(4);
      size_t n = pick == 0 ? static_cast<size_t>(rng.below(70000))
                           : static_cast<size_t>(rng.below(size_t{3} << 20));
      m.src.resize(n);
      fillRandom(m.src, rng);
      m.dst.assign(n + 32, kPoison);
      msgs.push_back(std::move(m));
    }
  }
  for (Msg& m : msgs) m.sreq = postSend(*m.link, m.src.data(), m.src.size());
  for (Msg& m : msgs) m.rreq = postRecv(*m.link, m.dst.data(), m.dst.size());
  for (size_t i = msgs.size(); i > 1; --i) std::swap(msgs[i - 1], msgs[rng.below(i)]);
  for (Msg& m : msgs) {
    size_t sent = 0, got = 0;
    ASSERT_TRUE(waitPair(*m.link, m.sreq, m.rreq, &sent, &got));
    EXPECT_EQ(sent, m.src.size());
    ASSERT_EQ(got, m.src.size());
    ASSERT_EQ(firstBadByte(m.dst, m.src, got), -1) << "size " << got;
  }
}

// Six connections (three each way) of 4 socket groups between two engines
// with 3 shared helpers each: every thread serves lanes of several comms,
// send and receive alike. Sleeping helpers, then spinning ones.
TEST(SocketNetShared, ManyConnectionsFewThreads) {
  test::Rng rng(test::testSeed(), 31);
  for (int64_t spinUs : {int64_t{0}, int64_t{300}}) {
    SCOPED_TRACE("spin " + std::to_string(spinUs) + " us");
    auto a = makeNet(loParams(4, 2), shared(3, spinUs));
    auto b = makeNet(loParams(4, 2), shared(3, spinUs));
    ASSERT_TRUE(a && b);
    const uint64_t late = socketNetLateWakeups();
    std::vector<std::unique_ptr<Link>> owned;
    std::vector<Link*> links;
    for (int i = 0; i < 6; ++i) {
      NetEngine* from = i % 2 ? b.get() : a.get();
      NetEngine* to = i % 2 ? a.get() : b.get();
      owned.push_back(std::make_unique<Link>(Link{from, to}));
      ASSERT_TRUE(connectLink(owned.back().get()));
      links.push_back(owned.back().get());
    }
    for (int round = 0; round < 3; ++round) {
      burst(links, 4, rng);
      if (HasFatalFailure()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(rng.below(600)));
    }
    // The gaps are far shorter than a helper's poll timeout, so a sleep that
    // outlasted posted work can only be a lost wake-up.
    EXPECT_EQ(socketNetLateWakeups(), late);
  }
}

// However many connections come, the process has only the shared helpers,
// started with the first message; comms close (leaving the threads) while
// others keep moving data, and new ones reuse the threads.
TEST(SocketNetShared, ConnectionsComeAndGo) {
  test::Rng rng(test::testSeed(), 32);
  auto net = makeNet(loParams(4, 1), shared(2, 100));
  ASSERT_TRUE(net);
  const int before = test::countThreads();
  ASSERT_GT(before, 0);
  auto keep = std::make_unique<Link>(Link{net.get(), net.get()});
  ASSERT_TRUE(connectLink(keep.get()));
  EXPECT_EQ(test::countThreads(), before) << "threads started at connect";
  for (int cycle = 0; cycle < 4; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    std::vector<std::unique_ptr<Link>> temp;
    std::vector<Link*> links{keep.get()};
    for (int i = 0; i < 3; ++i) {
      temp.push_back(std::make_unique<Link>(Link{net.get(), net.get()}));
      ASSERT_TRUE(connectLink(temp.back().get()));
      links.push_back(temp.back().get());
    }
    burst(links, 3, rng);
    if (HasFatalFailure()) return;
    EXPECT_EQ(test::countThreads(), before + 2) << "only the two shared helpers";
    // Close two of the three with messages still queued on their lanes.
    for (int i = 0; i < 2; ++i) {
      std::vector<uint8_t> src(size_t{2} << 20, static_cast<uint8_t>(cycle));
      postSend(*temp[static_cast<size_t>(i)], src.data(), src.size());
      temp[static_cast<size_t>(i)].reset();
    }
    std::vector<Link*> rest{keep.get(), temp[2].get()};
    burst(rest, 2, rng);
    if (HasFatalFailure()) return;
  }
  keep.reset();
  {
    Link last{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&last));
    roundTrip(last, (size_t{1} << 20) + 5, (size_t{1} << 20) + 5, rng);
  }
  net.reset();
  EXPECT_TRUE(pollUntil([&] { return test::countThreads() == before; }))
      << "joined with the engine";
}

// A receiver closing one connection mid-transfer fails that connection's
// send within seconds; the other connections on the same threads go on.
TEST(SocketNetShared, OneCommFailsOthersGoOn) {
  test::Rng rng(test::testSeed(), 33);
  auto net = makeNet(loParams(2, 1), shared(2, 0));
  ASSERT_TRUE(net);
  Link victim{net.get(), net.get()};
  Link other{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&victim));
  ASSERT_TRUE(connectLink(&other));
  std::vector<uint8_t> src(size_t{4} << 20, 7);
  int completed = 0;
  void* sreq = stuckSend(victim, src, &completed);
  ASSERT_NE(sreq, nullptr) << "256 MiB fit in the socket buffers";
  closeReceiverUnderStuckSend(victim, sreq);
  if (HasFatalFailure()) return;
  std::vector<Link*> links{&other};
  burst(links, 6, rng);
}

// The automatic settings follow the CPUs the process may use; explicit
// values win; out-of-range values WARN and count as automatic.
TEST(SocketNetShared, AutomaticSettings) {
  const Params none = Params::fromValues({});
  const struct {
    int cores;
    int shared;
    int64_t spinUs;
  } want[] = {{1, 2, 0},    {2, 2, 0},    {8, 2, 0},    {15, 3, 0},
              {16, 4, 500}, {32, 8, 500}, {256, 8, 500}};
  for (const auto& w : want) {
    SocketNetTuning t = resolveSocketNetTuning(none, SocketNetTuning{}, w.cores);
    EXPECT_EQ(t.sharedHelpers, w.shared) << w.cores << " cores";
    EXPECT_EQ(t.helperSpinUs, w.spinUs) << w.cores << " cores";
  }
  const Params set =
      Params::fromValues({{"FERRY_NET_SHARED_HELPERS", "0"}, {"FERRY_NET_HELPER_SPIN_US", "70"}});
  SocketNetTuning t = resolveSocketNetTuning(set, SocketNetTuning{}, 64);
  EXPECT_EQ(t.sharedHelpers, 0);
  EXPECT_EQ(t.helperSpinUs, 70);
  SocketNetTuning given;
  given.sharedHelpers = 5;
  given.helperSpinUs = 0;
  t = resolveSocketNetTuning(set, given, 64);
  EXPECT_EQ(t.sharedHelpers, 5);
  EXPECT_EQ(t.helperSpinUs, 0);
  for (const char* bad : {"-2", "65"}) {
    SCOPED_TRACE(bad);
    t = resolveSocketNetTuning(Params::fromValues({{"FERRY_NET_SHARED_HELPERS", bad}}),
                               SocketNetTuning{}, 12);
    EXPECT_NE(lastWarning().find(std::string("FERRY_NET_SHARED_HELPERS=") + bad), std::string::npos)
        << lastWarning();
    EXPECT_EQ(t.sharedHelpers, 3);
  }
}

// Processes on one host split the CPUs between their helpers only when
// their masks must overlap (together they claim more CPUs than are online).
TEST(SocketNetShared, CpuBudgetSharesAnUnboundHost) {
  EXPECT_EQ(helperCpuBudget(32, 32, 1), 32);    // one rank: its mask
  EXPECT_EQ(helperCpuBudget(192, 192, 8), 24);  // unbound: an eighth each
  EXPECT_EQ(helperCpuBudget(96, 192, 8), 12);   // a container's cpuset, unbound ranks
  EXPECT_EQ(helperCpuBudget(24, 192, 8), 24);   // bound, disjoint: each keeps its share
  EXPECT_EQ(helperCpuBudget(4, 2, 8), 1);       // never below one
  EXPECT_EQ(helperCpuBudget(0, 0, 0), 1);       // unknown counts
  // What the automatic settings make of it: 8 unbound processes on 128 CPUs get
  // 4 spinning helpers each, not 8 (64 spinning threads on the host).
  const Params none = Params::fromValues({});
  SocketNetTuning t = resolveSocketNetTuning(none, SocketNetTuning{}, helperCpuBudget(128, 128, 8));
  EXPECT_EQ(t.sharedHelpers, 4);
  EXPECT_EQ(t.helperSpinUs, 500);
}

// The knob reaches the engine: N shared helpers are all the threads it
// starts, 0 gives each connection its own (the default layout: 4 each way).
TEST(SocketNetShared, KnobSetsTheThreads) {
  for (const char* n : {"0", "3"}) {
    SCOPED_TRACE(n);
    auto net = makeNet(
        Params::fromValues({{"NCCL_SOCKET_IFNAME", "lo"}, {"FERRY_NET_SHARED_HELPERS", n}}));
    ASSERT_TRUE(net);
    Link l{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&l));
    test::Rng rng(test::testSeed(), 34);
    const int before = test::countThreads();
    roundTrip(l, (size_t{1} << 20) + 9, (size_t{1} << 20) + 9, rng);
    EXPECT_EQ(test::countThreads(), before + (n[0] == '0' ? 8 : 3));
  }
}

}  // namespace
}  // namespace ferry::net
