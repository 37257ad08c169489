// The built-in socket network engine (net/socket_net.h) over loopback TCP:
// device selection and knobs, byte-exact transfers of many sizes into
// poisoned buffers, many requests in flight both ways, several thread/socket
// layouts, receive-size rules, a peer that closes mid-transfer, strangers on
// the listen port, memory registration. Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "bootstrap/socket.h"
#include "common/proc.h"
#include "common/random.h"
#include "core/log.h"
#include "core/params.h"
#include "net/socket_net.h"
#include "unit/socket_net_util.h"

namespace ferry::net {
namespace {

using namespace socktest;  // NOLINT: the shared helpers of these tests

TEST(SocketNetSetup, LoopbackDevice) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  EXPECT_STREQ(net->name(), "Socket");
  int n = 0;
  ASSERT_EQ(net->devices(&n), ncclSuccess);
  ASSERT_EQ(n, 1);
  NetProperties p;
  ASSERT_EQ(net->properties(0, &p), ncclSuccess);
  EXPECT_EQ(p.name, "lo");
  EXPECT_EQ(p.ptrSupport, kPtrHost);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_GT(p.maxComms, 1000);
  EXPECT_GT(p.speedMbps, 0);
  EXPECT_EQ(p.latencyUs, 0);
  EXPECT_EQ(net->properties(1, &p), ncclInvalidArgument);
  EXPECT_EQ(net->properties(-1, &p), ncclInvalidArgument);
}

TEST(SocketNetSetup, BadInterfaceOrFamily) {
  std::unique_ptr<NetEngine> net;
  EXPECT_EQ(createSocketNet(Params::fromValues({{"NCCL_SOCKET_IFNAME", "=no_such_if0"}}), &net),
            ncclSystemError);
  EXPECT_NE(lastWarning().find("no_such_if0"), std::string::npos) << lastWarning();
  EXPECT_EQ(createSocketNet(Params::fromValues({{"NCCL_SOCKET_FAMILY", "AF_BOGUS"}}), &net),
            ncclInvalidArgument);
  EXPECT_FALSE(net);
}

boot::InterfaceAddress iface(const char* name, const char* ip, bool loopback = false) {
  boot::InterfaceAddress ia;
  ia.name = name;
  std::string text = strchr(ip, ':') ? std::string("[") + ip + "]:0" : std::string(ip) + ":0";
  EXPECT_EQ(boot::SocketAddress::parse(text, &ia.addr), ncclSuccess);
  ia.loopback = loopback;
  return ia;
}

TEST(SocketNetSetup, SelectDevices) {
  std::vector<boot::InterfaceAddress> all = {
      iface("lo", "127.0.0.1", true), iface("eth0", "10.0.0.1"), iface("eth0", "fd00::1"),
      iface("docker0", "172.17.0.1"), iface("ib0", "10.1.0.1"),  iface("eth1", "fd00::2"),
      iface("lo", "::1", true)};
  auto names = [](const std::vector<boot::InterfaceAddress>& v) {
    std::string s;
    for (const auto& ia : v) s += ia.name + "=" + ia.addr.hostString() + " ";
    return s;
  };
  EXPECT_EQ(names(selectSocketNetDevices(all, "", AF_UNSPEC)),
            "eth0=10.0.0.1 ib0=10.1.0.1 eth1=fd00::2 ");
  EXPECT_EQ(names(selectSocketNetDevices(all, "", AF_INET6)), "eth0=fd00::1 eth1=fd00::2 ");
  EXPECT_EQ(names(selectSocketNetDevices(all, "eth", AF_UNSPEC)), "eth0=10.0.0.1 eth1=fd00::2 ");
  EXPECT_EQ(names(selectSocketNetDevices(all, "^eth,lo", AF_INET)),
            "docker0=172.17.0.1 ib0=10.1.0.1 ");
  EXPECT_EQ(names(selectSocketNetDevices(all, "lo", AF_UNSPEC)), "lo=127.0.0.1 ");
  EXPECT_EQ(names(selectSocketNetDevices(all, "=lo", AF_INET6)), "lo=::1 ");
  // Loopback only as the last resort of the default rule, never of an explicit one.
  std::vector<boot::InterfaceAddress> loOnly = {iface("lo", "127.0.0.1", true),
                                                iface("docker0", "172.17.0.1")};
  EXPECT_EQ(names(selectSocketNetDevices(loOnly, "", AF_UNSPEC)), "lo=127.0.0.1 ");
  EXPECT_EQ(names(selectSocketNetDevices(loOnly, "eth", AF_UNSPEC)), "");
}

TEST(SocketNetSetup, LayoutKnobs) {
  auto layout = [](const char* threads, const char* socks) {
    return resolveSocketNetLayout(
        Params::fromValues({{"NCCL_SOCKET_NTHREADS", threads}, {"NCCL_NSOCKS_PERTHREAD", socks}}));
  };
  auto is = [](SocketNetLayout l, int t, int s) {
    return l.nThreads == t && l.nSocksPerThread == s;
  };
  EXPECT_TRUE(is(layout("0", "0"), 4, 2));
  EXPECT_TRUE(is(layout("1", "1"), 1, 1));
  EXPECT_TRUE(is(layout("2", "0"), 2, 2));
  EXPECT_TRUE(is(layout("16", "4"), 16, 4));
  EXPECT_TRUE(is(layout("8", "8"), 8, 8));
  EXPECT_TRUE(is(layout("17", "1"), 4, 2));
  EXPECT_NE(lastWarning().find("NCCL_SOCKET_NTHREADS=17"), std::string::npos) << lastWarning();
  EXPECT_TRUE(is(layout("2", "-3"), 4, 2));
  EXPECT_NE(lastWarning().find("NCCL_NSOCKS_PERTHREAD=-3"), std::string::npos) << lastWarning();
  EXPECT_TRUE(is(layout("16", "16"), 4, 2));
  EXPECT_NE(lastWarning().find("exceeds 64"), std::string::npos) << lastWarning();
  EXPECT_TRUE(is(layout("3", "100"), 4, 2));
  // A negative helper spin is reported and read as 0; the engine still works.
  auto net = makeNet(
      Params::fromValues({{"NCCL_SOCKET_IFNAME", "lo"}, {"FERRY_NET_HELPER_SPIN_US", "-5"}}));
  ASSERT_TRUE(net);
  EXPECT_NE(lastWarning().find("FERRY_NET_HELPER_SPIN_US=-5"), std::string::npos) << lastWarning();
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  test::Rng rng(test::testSeed(), 13);
  roundTrip(l, (size_t{1} << 20) + rng.below(4096), size_t{2} << 20, rng);
}

TEST(SocketNetSetup, BadHandleAndUnknownComms) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  char junk[kNetHandleBytes];
  memset(junk, 0x5a, sizeof(junk));
  void* comm = nullptr;
  EXPECT_EQ(net->connect(0, junk, &comm), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  int dummy = 0;
  void* req = nullptr;
  EXPECT_EQ(net->isend(&dummy, &dummy, 4, 0, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(net->closeSend(&dummy), ncclInvalidArgument);
  EXPECT_EQ(net->closeListen(&dummy), ncclInvalidArgument);
  EXPECT_EQ(net->accept(&dummy, &comm), ncclInvalidArgument);
}

// Sizes from empty to 64 MiB, fresh random data, poisoned receive buffers
// one page larger than the message (the tail must stay poisoned).
TEST(SocketNetData, SizesExact) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  test::Rng rng(test::testSeed(), 1);
  // 65536 / 65537: the last message on the control stream, the first on
  // the data sockets (kInlineBytes).
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{4093}, size_t{16384}, size_t{16385}, size_t{65536},
        size_t{65537}, size_t{262147}, size_t{1000003}, size_t{4} << 20, size_t{64} << 20}) {
    roundTrip(l, n, n + 4096, rng);
    if (HasFatalFailure()) return;
  }
  // A zero-byte message into a zero-byte buffer, and a receive buffer larger
  // than the message (size reported, the rest untouched).
  roundTrip(l, 0, 0, rng);
  roundTrip(l, 1000, 1 << 20, rng);
}

TEST(SocketNetData, Layouts) {
  test::Rng rng(test::testSeed(), 2);
  for (auto [threads, socks] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{4, 4}}) {
    SCOPED_TRACE(std::to_string(threads) + "x" + std::to_string(socks));
    auto net = makeNet(loParams(threads, socks));
    ASSERT_TRUE(net);
    Link l{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&l));
    for (void* c : {l.send, l.recv}) {
      SocketNetLayout got = socketNetCommLayout(c);
      EXPECT_EQ(got.nThreads, threads);
      EXPECT_EQ(got.nSocksPerThread, socks);
    }
    for (size_t n : {size_t{3}, size_t{65537}, (size_t{3} << 20) + 11, size_t{8} << 20}) {
      roundTrip(l, n, n, rng);
      if (HasFatalFailure()) return;
    }
  }
}

// A connection's own helper threads (FERRY_NET_SHARED_HELPERS=0) start
// with its first message: a communicator connects to every peer on another
// host at init, most pairs of a large job never exchange a byte, and each
// thread costs. (The shared helpers: socket_net_shared_test.cc.)
TEST(SocketNetData, HelperThreadsStartWithTheFirstMessage) {
  SocketNetTuning own;
  own.sharedHelpers = 0;
  auto net = makeNet(loParams(3, 1), own);
  ASSERT_TRUE(net);
  const int before = test::countThreads();
  ASSERT_GT(before, 0);
  {
    Link l{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&l));
    EXPECT_EQ(test::countThreads(), before) << "threads started at connect";
    test::Rng rng(test::testSeed(), 9);
    roundTrip(l, (size_t{1} << 20) + rng.below(4096), size_t{2} << 20, rng);
    EXPECT_EQ(test::countThreads(), before + 6) << "3 per direction after the first message";
  }
  EXPECT_TRUE(pollUntil([&] { return test::countThreads() == before; })) << "joined at close";
}

// 64 messages of assorted sizes posted at once on each of two connections
// (one each way), tested in reverse order; every byte checked.
TEST(SocketNetData, ManyInFlightBothWays) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  Link ab{net.get(), net.get()}, ba{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&ab));
  ASSERT_TRUE(connectLink(&ba));
  constexpr int kMsgs = 64;
  test::Rng rng(test::testSeed(), 3);
  struct Msg {
    std::vector<uint8_t> src, dst;
    void* sreq = nullptr;
    void* rreq = nullptr;
    Link* link = nullptr;
  };
  std::vector<Msg> msgs(2 * kMsgs);
  for (int i = 0; i < 2 * kMsgs; ++i) {
    Msg& m = msgs[static_cast<size_t>(i)];
    m.link = i % 2 ? &ba : &ab;
    size_t n = rng.below(4) == 0 ? 0 : static_cast<size_t>(rng.below(300000));
    m.src.resize(n);
    fillRandom(m.src, rng);
    m.dst.assign(n + 64, kPoison);
  }
  // Sends first (they sit in the ring and the socket buffers), then receives.
  for (Msg& m : msgs) m.sreq = postSend(*m.link, m.src.data(), m.src.size());
  for (Msg& m : msgs) m.rreq = postRecv(*m.link, m.dst.data(), m.dst.size());
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it) {
    size_t sent = 0, got = 0;
    ASSERT_TRUE(waitPair(*it->link, it->sreq, it->rreq, &sent, &got));
    EXPECT_EQ(sent, it->src.size());
    ASSERT_EQ(got, it->src.size());
    EXPECT_EQ(firstBadByte(it->dst, it->src, got), -1);
  }
}

// FERRY_NET_HELPER_SPIN_US: messages in both directions with random gaps,
// some shorter than the helpers' spin (post() finds them awake and writes
// no eventfd), some longer (they sleep and must be woken); every byte
// checked. A lost wake-up leaves a message undelivered and fails the wait.
TEST(SocketNetData, SpinningHelpers) {
  test::Rng rng(test::testSeed(), 12);
  for (int64_t spinUs : {int64_t{300}, int64_t{5000}}) {
    SCOPED_TRACE("spin " + std::to_string(spinUs) + " us");
    // One engine takes the knobs from the parameters (helpers of each
    // connection's own), the other from the tuning, which wins over the
    // parameters (three shared helpers).
    Params params = Params::fromValues({{"NCCL_SOCKET_IFNAME", "lo"},
                                        {"FERRY_NET_HELPER_SPIN_US", std::to_string(spinUs)},
                                        {"FERRY_NET_SHARED_HELPERS", "0"}});
    SocketNetTuning tuning;
    tuning.helperSpinUs = spinUs;
    tuning.sharedHelpers = 3;
    auto a = makeNet(params);
    auto b = makeNet(loParams(), tuning);
    ASSERT_TRUE(a && b);
    Link ab{a.get(), b.get()}, ba{b.get(), a.get()};
    ASSERT_TRUE(connectLink(&ab));
    ASSERT_TRUE(connectLink(&ba));
    const uint64_t late = socketNetLateWakeups();
    for (int i = 0; i < 24; ++i) {
      const size_t n = (size_t{64} << 10) + 1 + rng.below(size_t{1} << 20);
      roundTrip(i % 2 ? ba : ab, n, n + 100, rng);
      if (HasFatalFailure()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(rng.below(2 * spinUs)));
    }
    // The gaps are far shorter than a helper's poll timeout, so a sleep that
    // outlasted posted work can only be a lost wake-up.
    EXPECT_EQ(socketNetLateWakeups(), late);
  }
}

// The request ring holds 128 outstanding requests; the next post answers
// "not now" (null request) until one is reported.
TEST(SocketNetData, FullRingSaysNotNow) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  uint8_t byte = 42;
  std::vector<void*> reqs;
  for (int i = 0; i < 128; ++i) {
    void* r = nullptr;
    ASSERT_EQ(net->isend(l.send, &byte, 1, 0, nullptr, &r), ncclSuccess);
    ASSERT_NE(r, nullptr) << i;
    reqs.push_back(r);
  }
  void* extra = nullptr;
  ASSERT_EQ(net->isend(l.send, &byte, 1, 0, nullptr, &extra), ncclSuccess);
  EXPECT_EQ(extra, nullptr);
  size_t sent = 0;
  ASSERT_TRUE(waitRequest(net.get(), reqs[0], &sent));
  int done = 0;
  EXPECT_EQ(net->test(reqs[0], &done, &sent), ncclInvalidArgument);  // already reported
  ASSERT_EQ(net->isend(l.send, &byte, 1, 0, nullptr, &extra), ncclSuccess);
  EXPECT_NE(extra, nullptr);
}

TEST(SocketNetData, TruncatedReceiveFails) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  std::vector<uint8_t> src(2000, 1), dst(1000, kPoison);
  void* rreq = postRecv(l, dst.data(), dst.size());
  void* sreq = postSend(l, src.data(), src.size());
  size_t got = 0;
  Status s = ncclSuccess;
  ASSERT_TRUE(waitRequest(net.get(), rreq, &got, &s));
  EXPECT_EQ(s, ncclInvalidUsage);
  EXPECT_NE(lastWarning().find("2000 bytes"), std::string::npos) << lastWarning();
  for (uint8_t b : dst) ASSERT_EQ(b, kPoison);
  // The stream cannot be trusted after that: later receives fail too.
  void* next = postRecv(l, dst.data(), dst.size());
  ASSERT_TRUE(waitRequest(net.get(), next, &got, &s));
  EXPECT_NE(s, ncclSuccess);
  ASSERT_TRUE(waitRequest(net.get(), sreq, &got));
}

// The receiver goes away while a send is stuck in full socket buffers: the
// send fails with ncclSystemError within seconds, and so does a later one.
TEST(SocketNetFailure, ReceiverClosesMidTransfer) {
  auto net = makeNet(loParams(1, 1));
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  std::vector<uint8_t> src(4 << 20, 3);
  int completed = 0;
  void* sreq = stuckSend(l, src, &completed);
  ASSERT_NE(sreq, nullptr) << "256 MiB fit in the socket buffers";
  closeReceiverUnderStuckSend(l, sreq);
  if (HasFatalFailure()) return;
  Status s = ncclSuccess;
  size_t n = 0;
  void* later = postSend(l, src.data(), 10);
  ASSERT_TRUE(waitRequest(net.get(), later, &n, &s, 5000));
  EXPECT_EQ(s, ncclSystemError);
}

// The sender closes with a message half sent: the receiver gets the whole
// messages that made it, then a receive fails instead of waiting forever.
TEST(SocketNetFailure, SenderClosesMidTransfer) {
  auto net = makeNet(loParams(1, 1));
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  std::vector<uint8_t> src(4 << 20, 4), dst(4 << 20, kPoison);
  int completed = 0;
  ASSERT_NE(stuckSend(l, src, &completed), nullptr) << "256 MiB fit in the socket buffers";
  // Closing mid-send joins the helper thread although it waits on a full
  // socket; the pending request dies with the comm.
  ASSERT_EQ(net->closeSend(l.send), ncclSuccess);
  l.send = nullptr;
  auto t0 = Clock::now();
  Status s = ncclSuccess;
  int received = 0;
  // The stuck message may still have squeezed through before the close,
  // hence one more attempt than the sends that completed.
  for (int i = 0; i <= completed + 1 && s == ncclSuccess; ++i) {
    void* rreq = postRecv(l, dst.data(), dst.size());
    size_t n = 0;
    ASSERT_TRUE(waitRequest(net.get(), rreq, &n, &s, 5000));
    if (s == ncclSuccess) {
      ASSERT_EQ(n, src.size());
      ASSERT_EQ(memcmp(dst.data(), src.data(), n), 0);
      ++received;
    }
  }
  EXPECT_EQ(s, ncclSystemError);
  EXPECT_GE(received, completed);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  void* later = postRecv(l, dst.data(), 10);
  size_t n = 0;
  ASSERT_TRUE(waitRequest(net.get(), later, &n, &s, 5000));
  EXPECT_EQ(s, ncclSystemError);
}

// The sender's last message is complete on its side (its bytes are in the
// kernel's socket buffers), then it closes, as a rank does that leaves after
// its last collective; the receiver reads the announcement only afterwards,
// with one more receive posted ahead (a ring hop's). The announced message
// must arrive whole: the close ends the stream after it, so only the
// receive posted beyond it fails (coll.hosts.stress.3x2 hung in CI when the
// close dropped a message still in the data sockets).
TEST(SocketNetFailure, SenderClosesAfterItsLastMessage) {
  auto net = makeNet(loParams(2, 2));
  ASSERT_TRUE(net);
  test::Rng rng(test::testSeed(), 0xC105E);
  for (int round = 0; round < 5; ++round) {
    Link l{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&l));
    std::vector<uint8_t> src(1 << 20), dst(1 << 20, kPoison), ahead(64, kPoison);
    fillRandom(src, rng);
    void* rreq = postRecv(l, dst.data(), dst.size());
    void* aheadReq = postRecv(l, ahead.data(), ahead.size());
    void* sreq = postSend(l, src.data(), src.size());
    ASSERT_TRUE(rreq && aheadReq && sreq);
    size_t n = 0;
    ASSERT_TRUE(waitRequest(net.get(), sreq, &n)) << "1 MiB fits in the socket buffers";
    ASSERT_EQ(net->closeSend(l.send), ncclSuccess);
    l.send = nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the FIN arrives
    Status s = ncclSuccess;
    ASSERT_TRUE(waitRequest(net.get(), rreq, &n, &s, 5000));
    ASSERT_EQ(s, ncclSuccess) << "round " << round << ": the last message was dropped";
    ASSERT_EQ(n, src.size());
    EXPECT_EQ(firstBadByte(dst, src, n), -1) << "round " << round;
    ASSERT_TRUE(waitRequest(net.get(), aheadReq, &n, &s, 5000));
    EXPECT_EQ(s, ncclSystemError) << "a receive beyond the last message fails";
    EXPECT_EQ(firstBadByte(ahead, src, 0), -1) << "nothing lands in the receive posted ahead";
  }
}

// Closing both ends with requests in flight frees everything (ASan/LSan
// builds check the leak part) and never hangs.
TEST(SocketNetFailure, CloseWithRequestsInFlight) {
  auto net = makeNet(loParams(4, 4));
  ASSERT_TRUE(net);
  std::vector<uint8_t> src(8 << 20, 5), dst(8 << 20);
  auto t0 = Clock::now();
  {
    Link l{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&l));
    for (int i = 0; i < 4; ++i) postSend(l, src.data(), src.size());
    for (int i = 0; i < 4; ++i) postRecv(l, dst.data(), dst.size());
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

// A raw TCP client of the listen port.
boot::Socket rawConnect(const void* handle) {
  // The handle's address: family at byte 12, port at 14, IP at 16 (LE fields).
  const auto* h = static_cast<const uint8_t*>(handle);
  int family = h[12] | (h[13] << 8);
  uint16_t port = static_cast<uint16_t>(h[14] | (h[15] << 8));
  boot::SocketAddress addr = boot::SocketAddress::fromIp(family, h + 16, port);
  boot::Socket s;
  EXPECT_EQ(boot::Socket::connect(addr, boot::WaitContext::make(5000, nullptr), "test", &s),
            ncclSuccess);
  return s;
}

// A hello as the engine writes it (socket_net_internal.h), with knobs to break it.
std::vector<uint8_t> hello(uint64_t magic, uint32_t version, uint16_t index, uint16_t count,
                           uint16_t threads, uint64_t id) {
  std::vector<uint8_t> b(32, 0);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(magic >> (8 * i));
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>(version >> (8 * i));
  b[12] = static_cast<uint8_t>(index), b[13] = static_cast<uint8_t>(index >> 8);
  b[14] = static_cast<uint8_t>(count), b[15] = static_cast<uint8_t>(count >> 8);
  b[16] = static_cast<uint8_t>(threads), b[17] = static_cast<uint8_t>(threads >> 8);
  for (int i = 0; i < 8; ++i) b[24 + i] = static_cast<uint8_t>(id >> (8 * i));
  return b;
}

// True once the listener has closed the stranger's socket (EOF or reset).
bool closedByPeer(const boot::Socket& s) {
  uint8_t buf[64];
  ssize_t n = ::recv(s.fd(), buf, sizeof(buf), MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

TEST(SocketNetSetup, StrangersDoNotDisturbRealConnection) {
  SocketNetTuning tuning;
  tuning.helloTimeoutMs = 300;
  tuning.groupTimeoutMs = 600;
  auto net = makeNet(loParams(), tuning);
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  char handle[kNetHandleBytes] = {};
  ASSERT_EQ(net->listen(0, handle, &l.listen), ncclSuccess);
  const uint64_t kMagic = 0x3174654e79727246ull;
  std::vector<boot::Socket> strangers;
  auto stranger = [&](const std::vector<uint8_t>& bytes) {
    strangers.push_back(rawConnect(handle));
    if (!bytes.empty()) {
      ASSERT_EQ(strangers.back().sendAll(bytes.data(), bytes.size(),
                                         boot::WaitContext::make(1000, nullptr), "junk"),
                ncclSuccess);
    }
  };
  const char* http = "GET / HTTP/1.0\r\n\r\n";
  stranger(std::vector<uint8_t>(http, http + strlen(http)));  // junk
  stranger({});                                               // silent
  std::vector<uint8_t> loris = hello(kMagic, 1, 0, 5, 2, 7);
  loris.resize(11);
  stranger(loris);                              // slow loris: a prefix
  stranger(hello(kMagic, 99, 0, 5, 2, 7));      // wrong version
  stranger(hello(kMagic, 1, 9, 5, 2, 7));       // index out of range
  stranger(hello(kMagic, 1, 0, 5, 3, 7));       // 4 sockets / 3 threads
  stranger(hello(kMagic, 1, 0, 5, 2, 0x1234));  // never completes
  stranger(hello(kMagic, 1, 1, 5, 2, 0x1234));
  // Strangers arrive before and during the real connection's set-up.
  void* none = nullptr;
  ASSERT_EQ(net->accept(l.listen, &none), ncclSuccess);
  EXPECT_EQ(none, nullptr);
  Status bad = ncclSuccess;
  ASSERT_TRUE(pollUntil([&] {
    if (!l.send && bad == ncclSuccess) bad = net->connect(0, handle, &l.send);
    if (strangers.size() < 10) stranger({0xde, 0xad});
    if (!l.recv && bad == ncclSuccess) bad = net->accept(l.listen, &l.recv);
    return bad != ncclSuccess || (l.send && l.recv);
  }));
  ASSERT_EQ(bad, ncclSuccess);
  test::Rng rng(test::testSeed(), 4);
  roundTrip(l, 300001, 300001, rng);
  // Every stranger is closed by the listener in bounded time (bad ones at
  // once, silent and partial ones at the hello deadline, the incomplete
  // connection at the group deadline), and no ghost connection appears.
  ASSERT_TRUE(pollUntil(
      [&] {
        void* ghost = nullptr;
        EXPECT_EQ(net->accept(l.listen, &ghost), ncclSuccess);
        EXPECT_EQ(ghost, nullptr);
        return std::all_of(strangers.begin(), strangers.end(), closedByPeer);
      },
      3000));
  roundTrip(l, 17, 17, rng);
}

TEST(SocketNetSetup, RegMrAndFlush) {
  auto net = makeNet(loParams());
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  std::vector<uint8_t> buf(4096);
  void* mh = nullptr;
  ASSERT_EQ(net->regMr(l.send, buf.data(), buf.size(), kPtrHost, &mh), ncclSuccess);
  EXPECT_NE(mh, nullptr);
  void* cuda = nullptr;
  EXPECT_EQ(net->regMr(l.recv, buf.data(), buf.size(), kPtrCuda, &cuda), ncclInvalidArgument);
  EXPECT_EQ(cuda, nullptr);
  EXPECT_EQ(net->deregMr(l.recv, mh), ncclInvalidArgument);  // registered on the other comm
  EXPECT_EQ(net->deregMr(l.send, mh), ncclSuccess);
  EXPECT_EQ(net->deregMr(l.send, mh), ncclInvalidArgument);
  void* req = &buf;
  void* data = buf.data();
  int size = 4096;
  EXPECT_EQ(net->iflush(l.recv, 1, &data, &size, &mh, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  // A registration left behind is freed with the comm.
  ASSERT_EQ(net->regMr(l.recv, buf.data(), buf.size(), kPtrHost, &mh), ncclSuccess);
}

// Two threads, an engine each (as two processes would have): 128 MiB in
// 8 messages, throughput printed for information only.
TEST(SocketNetData, TwoThreadThroughput) {
  auto sendNet = makeNet(loParams());
  auto recvNet = makeNet(loParams());
  ASSERT_TRUE(sendNet && recvNet);
  Link l{sendNet.get(), recvNet.get()};
  ASSERT_TRUE(connectLink(&l));
  constexpr size_t kBytes = 16 << 20;
  constexpr int kMsgs = 8;
  std::vector<uint8_t> src(kBytes), dst(kBytes, kPoison);
  test::Rng rng(test::testSeed(), 5);
  fillRandom(src, rng);
  bool senderOk = true;
  auto t0 = Clock::now();
  std::thread sender([&] {
    for (int i = 0; i < kMsgs && senderOk; ++i) {
      void* r = postSend(l, src.data(), kBytes);
      size_t n = 0;
      senderOk = r && waitRequest(sendNet.get(), r, &n) && n == kBytes;
    }
  });
  for (int i = 0; i < kMsgs; ++i) {
    void* r = postRecv(l, dst.data(), kBytes);
    size_t n = 0;
    EXPECT_TRUE(r && waitRequest(recvNet.get(), r, &n));
    EXPECT_EQ(n, kBytes);
  }
  sender.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(senderOk);
  EXPECT_EQ(memcmp(src.data(), dst.data(), kBytes), 0);
  const SocketNetLayout layout = socketNetCommLayout(l.send);
  std::printf(
      "[     INFO ] socket engine loopback, %d threads x %d sockets: %.2f GB/s (%d x %zu MiB in "
      "%.3f s)\n",
      layout.nThreads, layout.nSocksPerThread, kMsgs * static_cast<double>(kBytes) / secs / 1e9,
      kMsgs, kBytes >> 20, secs);
}

}  // namespace
}  // namespace ferry::net
