// Helpers shared by the socket engine's unit tests (socket_net_test.cc,
// socket_net_shared_test.cc): connections between engines over loopback,
// posting and bounded waiting, random data and poisoned buffers.
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/random.h"
#include "core/params.h"
#include "net/socket_net.h"

namespace ferry::net::socktest {

using Clock = std::chrono::steady_clock;
constexpr int kWaitMs = 10000;  // longest any single wait in these tests may take
constexpr uint8_t kPoison = 0xA5;

inline Params loParams(int threads = 0, int socks = 0) {
  return Params::fromValues({{"NCCL_SOCKET_IFNAME", "lo"},
                             {"NCCL_SOCKET_NTHREADS", std::to_string(threads)},
                             {"NCCL_NSOCKS_PERTHREAD", std::to_string(socks)}});
}

inline std::unique_ptr<NetEngine> makeNet(const Params& params, SocketNetTuning tuning = {}) {
  std::unique_ptr<NetEngine> net;
  EXPECT_EQ(createSocketNet(params, tuning, &net), ncclSuccess);
  return net;
}

// Calls `step` until it returns true or the budget runs out; sleeps a
// little between calls so the helper threads get the (two) cores.
template <typename F>
inline bool pollUntil(F step, int ms = kWaitMs) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    if (step()) return true;
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

inline void fillRandom(std::vector<uint8_t>& buf, test::Rng& rng) {
  size_t i = 0;
  for (; i + 8 <= buf.size(); i += 8) {
    uint64_t v = rng.next();
    memcpy(buf.data() + i, &v, 8);
  }
  for (; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(rng.next());
}

// First differing byte of got[0..n) vs want, then poison expected in
// got[n..cap); -1 when all is as expected.
inline long long firstBadByte(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                              size_t n) {
  if (n > 0 && memcmp(got.data(), want.data(), n) != 0) {
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != want[i]) return static_cast<long long>(i);
    }
  }
  for (size_t i = n; i < got.size(); ++i) {
    if (got[i] != kPoison) return static_cast<long long>(i);
  }
  return -1;
}

// A connection: `send` on sendNet, `recv` on recvNet (the same engine when
// one thread drives both ends). Closes whatever it holds.
struct Link {
  NetEngine* sendNet = nullptr;
  NetEngine* recvNet = nullptr;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ~Link() {
    if (send) {
      EXPECT_EQ(sendNet->closeSend(send), ncclSuccess);
    }
    if (recv) {
      EXPECT_EQ(recvNet->closeRecv(recv), ncclSuccess);
    }
    if (listen) {
      EXPECT_EQ(recvNet->closeListen(listen), ncclSuccess);
    }
  }
};

inline ::testing::AssertionResult connectLink(Link* l) {
  char handle[kNetHandleBytes] = {};
  if (l->recvNet->listen(0, handle, &l->listen) != ncclSuccess) {
    return ::testing::AssertionFailure() << "listen failed";
  }
  Status bad = ncclSuccess;
  bool ok = pollUntil([&] {
    if (!l->send && bad == ncclSuccess) bad = l->sendNet->connect(0, handle, &l->send);
    if (!l->recv && bad == ncclSuccess) bad = l->recvNet->accept(l->listen, &l->recv);
    return bad != ncclSuccess || (l->send && l->recv);
  });
  if (bad != ncclSuccess) return ::testing::AssertionFailure() << "connect/accept: " << bad;
  if (!ok) return ::testing::AssertionFailure() << "connect/accept did not finish";
  return ::testing::AssertionSuccess();
}

// Polls one request to completion; *status gets test()'s failure, if any.
inline ::testing::AssertionResult waitRequest(NetEngine* net, void* req, size_t* size,
                                              Status* status = nullptr, int ms = kWaitMs) {
  Status s = ncclSuccess;
  int done = 0;
  bool finished = pollUntil(
      [&] {
        s = net->test(req, &done, size);
        return s != ncclSuccess || done;
      },
      ms);
  if (status) *status = s;
  if (!finished) return ::testing::AssertionFailure() << "request did not complete";
  if (s != ncclSuccess && !status) return ::testing::AssertionFailure() << "test() = " << s;
  return ::testing::AssertionSuccess();
}

// Polls a send and its receive together (the receiver's test() is what
// reads the announcement and starts the data moving) until both are done.
inline ::testing::AssertionResult waitPair(Link& l, void* sreq, void* rreq, size_t* sent,
                                           size_t* got) {
  int sdone = 0, rdone = 0;
  Status s = ncclSuccess;
  bool finished = pollUntil([&] {
    if (!sdone && s == ncclSuccess) s = l.sendNet->test(sreq, &sdone, sent);
    if (!rdone && s == ncclSuccess) s = l.recvNet->test(rreq, &rdone, got);
    return s != ncclSuccess || (sdone && rdone);
  });
  if (s != ncclSuccess) return ::testing::AssertionFailure() << "test() = " << s;
  if (!finished) return ::testing::AssertionFailure() << "transfer did not complete";
  return ::testing::AssertionSuccess();
}

// Posts, retrying while the engine answers "not now".
inline void* postSend(Link& l, void* data, size_t n) {
  void* req = nullptr;
  EXPECT_TRUE(pollUntil([&] {
    EXPECT_EQ(l.sendNet->isend(l.send, data, n, 0, nullptr, &req), ncclSuccess);
    return req != nullptr;
  }));
  return req;
}

inline void* postRecv(Link& l, void* data, size_t cap) {
  void* req = nullptr;
  EXPECT_TRUE(pollUntil([&] {
    int tag = 0;
    void* mh = nullptr;
    EXPECT_EQ(l.recvNet->irecv(l.recv, 1, &data, &cap, &tag, &mh, &req), ncclSuccess);
    return req != nullptr;
  }));
  return req;
}

// One message of `n` bytes into a poisoned buffer of `cap` bytes.
inline void roundTrip(Link& l, size_t n, size_t cap, test::Rng& rng) {
  std::vector<uint8_t> src(n), dst(cap, kPoison);
  fillRandom(src, rng);
  void* rreq = postRecv(l, dst.data(), cap);
  void* sreq = postSend(l, src.data(), n);
  ASSERT_TRUE(rreq && sreq);
  size_t sent = 0, got = 0;
  ASSERT_TRUE(waitPair(l, sreq, rreq, &sent, &got));
  EXPECT_EQ(sent, n);
  ASSERT_EQ(got, n);
  EXPECT_EQ(firstBadByte(dst, src, n), -1) << "size " << n << " capacity " << cap;
}

// Posts 4 MiB sends nobody receives until one stays incomplete (the socket
// buffers are full): that one is mid-transfer. Null when buffers never fill.
inline void* stuckSend(Link& l, std::vector<uint8_t>& src, int* completed) {
  *completed = 0;
  for (int i = 0; i < 64; ++i) {
    void* req = postSend(l, src.data(), src.size());
    if (req == nullptr) return nullptr;
    // "Not done yet" may only mean the helper thread was not scheduled (a
    // loaded 2-core CI machine): only a send that stays incomplete for a
    // while, with nobody receiving, is stuck in full buffers.
    int done = 0;
    size_t n = 0;
    for (int check = 0; check < 10 && !done; ++check) {
      std::this_thread::sleep_for(std::chrono::milliseconds(check == 0 ? 20 : 50));
      EXPECT_EQ(l.sendNet->test(req, &done, &n), ncclSuccess);
    }
    if (!done) return req;
    ++*completed;
  }
  return nullptr;
}

// Closes the link's receiving end while `sreq` (a send of the link) is stuck
// in full socket buffers: the send must fail with ncclSystemError within
// seconds.
inline void closeReceiverUnderStuckSend(Link& l, void* sreq) {
  const auto t0 = Clock::now();
  ASSERT_EQ(l.recvNet->closeRecv(l.recv), ncclSuccess);
  l.recv = nullptr;
  Status s = ncclSuccess;
  size_t n = 0;
  ASSERT_TRUE(waitRequest(l.sendNet, sreq, &n, &s, 5000));
  EXPECT_EQ(s, ncclSystemError);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace ferry::net::socktest
