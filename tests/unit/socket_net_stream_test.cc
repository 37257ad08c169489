// Streamed sends of the socket engine (NetEngine::isendStream / sendReady /
// recvPrefix) and the ring hops that use them (proxy/ring_hop.h), over
// loopback TCP:
//   - the chunk cut: every byte covered once, no chunk across a readiness
//     unit, hostile cuts refused;
//   - a streamed message whose later units are not even written yet: the
//     receiver sees each unit land (its prefix) before the sender writes
//     the next one, and never a byte past the sender's ready mark;
//   - small streamed messages (inline) wait until all is ready; bad marks
//     are refused; a receiver that leaves fails the half-ready send;
//   - a send hop and a receive hop carrying a "kernel's" primitives of one
//     to four slots, where the sending kernel writes a slot only once the
//     receiving kernel got the one before: only streamed steps can finish.
// Every wait is bounded; every payload is random and checked byte by byte
// against a poisoned buffer.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/random.h"
#include "common/socket_net_link.h"
#include "net/socket_net_internal.h"
#include "proxy/ring_hop.h"
#include "transport/net_link.h"

namespace ferry::net {
namespace {

using namespace testnet;  // NOLINT: the shared helpers read as local ones

TEST(SocketNetStream, ChunkPlansTileTheMessage) {
  test::Rng rng(test::testSeed());
  for (int round = 0; round < 2000; ++round) {
    const uint64_t unit = 4096 + rng.below(300000);
    const uint64_t maxPiece = 4096 + rng.below(200000);
    const uint64_t size = 1 + rng.below(unit * 9);
    const uint64_t piece = sock::streamPieceFor(unit, maxPiece);
    ASSERT_LE(piece, std::max(unit, maxPiece));
    sock::ChunkPlan p;
    ASSERT_TRUE(sock::planStream(size, unit, piece, &p)) << size << " " << unit << " " << piece;
    uint64_t next = 0;
    for (uint32_t i = 0; i < p.count; ++i) {
      const uint64_t off = p.offset(i);
      const uint64_t len = p.length(i);
      ASSERT_EQ(off, next) << "chunk " << i;
      ASSERT_GT(len, 0u);
      ASSERT_LE(len, piece);
      // Inside one unit: a ready prefix of whole units never waits on it.
      ASSERT_EQ(off / unit, (off + len - 1) / unit) << "chunk " << i << " crosses a unit";
      next = off + len;
    }
    ASSERT_EQ(next, size);
  }
  // Whole messages: one chunk per socket, none below 64 KiB.
  sock::ChunkPlan w = sock::planChunks(4 << 20, 8);
  EXPECT_EQ(w.count, 8u);
  EXPECT_EQ(w.length(7), 512u << 10);
  w = sock::planChunks(100 << 10, 8);
  EXPECT_EQ(w.count, 2u);
  EXPECT_EQ(w.length(1), (100u << 10) - (64u << 10));
  // What an announcement from a stranger may not ask for.
  sock::ChunkPlan p;
  EXPECT_FALSE(sock::planStream(1 << 20, 0, 4096, &p));             // no unit
  EXPECT_FALSE(sock::planStream(1 << 20, 65536, 0, &p));            // no piece
  EXPECT_FALSE(sock::planStream(1 << 20, 65536, 100, &p));          // tiny pieces
  EXPECT_FALSE(sock::planStream(1 << 20, 4096, 8192, &p));          // piece > unit
  EXPECT_FALSE(sock::planStream(~uint64_t{0}, 1 << 30, 4096, &p));  // millions of chunks
  EXPECT_TRUE(sock::planStream(1000, 1000, 1000, &p));              // a small whole unit
}

SocketNetTuning pieces(uint64_t bytes) {
  SocketNetTuning t;
  t.streamPieceBytes = bytes;
  return t;
}

void* postStream(Link& l, void* data, size_t n, size_t ready, size_t unit) {
  void* req = nullptr;
  EXPECT_TRUE(pollUntil([&] {
    EXPECT_EQ(l.sendNet->isendStream(l.send, data, n, ready, unit, nullptr, &req), ncclSuccess);
    return req != nullptr;
  }));
  return req;
}

// The sender's buffer holds poison past the ready mark; the receiver must
// see each unit arrive before the next is written, and nothing beyond.
TEST(SocketNetStream, PrefixLandsBeforeTheRestIsWritten) {
  test::Rng rng(test::testSeed());
  auto net = makeNet(loParams(2, 2), pieces(16 << 10));
  ASSERT_TRUE(net);
  ASSERT_TRUE(net->canStream());
  for (const uint64_t unit : {uint64_t{96} << 10, uint64_t{40000}, uint64_t{256} << 10}) {
    Link l{net.get(), net.get()};
    ASSERT_TRUE(connectLink(&l));
    const uint64_t units = 3 + rng.below(5);
    const uint64_t size = units * unit - rng.below(unit / 2);  // a short last unit
    std::vector<uint8_t> want(size), src(size, kPoison), dst(size + 4096, kPoison);
    fillRandom(want, rng);
    memcpy(src.data(), want.data(), unit);
    void* rreq = postRecv(l, dst.data(), dst.size());
    void* sreq = postStream(l, src.data(), size, unit, unit);
    ASSERT_TRUE(rreq && sreq);
    for (uint64_t ready = unit; ready < size;) {
      size_t prefix = 0;
      ASSERT_TRUE(pollUntil([&] {
        EXPECT_EQ(net->recvPrefix(rreq, &prefix), ncclSuccess);
        EXPECT_LE(prefix, ready) << "a byte past the ready mark arrived";
        return prefix >= ready;
      })) << "unit "
          << ready / unit << " of " << units << " never arrived (prefix " << prefix << ")";
      ASSERT_EQ(memcmp(dst.data(), want.data(), prefix), 0);
      const uint64_t next = std::min(size, ready + unit);
      memcpy(src.data() + ready, want.data() + ready, next - ready);
      ASSERT_EQ(net->sendReady(sreq, next), ncclSuccess);
      ready = next;
    }
    size_t sent = 0, got = 0;
    ASSERT_TRUE(waitPair(l, sreq, rreq, &sent, &got));
    EXPECT_EQ(sent, size);
    ASSERT_EQ(got, size);
    std::vector<uint8_t> full(want);
    EXPECT_EQ(firstBadByte(dst, full, size), -1) << "unit " << unit;
  }
}

TEST(SocketNetStream, SmallMessagesStreamTooAndBadMarksAreRefused) {
  test::Rng rng(test::testSeed());
  auto net = makeNet(loParams(2, 2));
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  // 48 KiB would ride inline if it were all there; half of it is not, so
  // it streams like a large one (its receiver may be what the rest waits on).
  std::vector<uint8_t> small(48 << 10), want(48 << 10), dst(64 << 10, kPoison);
  fillRandom(want, rng);
  memcpy(small.data(), want.data(), 24 << 10);
  memset(small.data() + (24 << 10), kPoison, 24 << 10);
  void* rreq = postRecv(l, dst.data(), dst.size());
  void* sreq = postStream(l, small.data(), small.size(), 24 << 10, 24 << 10);
  size_t prefix = 0;
  ASSERT_TRUE(pollUntil([&] {
    EXPECT_EQ(net->recvPrefix(rreq, &prefix), ncclSuccess);
    EXPECT_LE(prefix, 24u << 10);
    return prefix >= (24u << 10);
  }));
  memcpy(small.data(), want.data(), want.size());
  ASSERT_EQ(net->sendReady(sreq, small.size()), ncclSuccess);
  size_t sent = 0, got = 0;
  ASSERT_TRUE(waitPair(l, sreq, rreq, &sent, &got));
  ASSERT_EQ(got, small.size());
  EXPECT_EQ(firstBadByte(dst, want, got), -1);
  void* req = nullptr;
  // Marks that go back or past the end, a zero unit: refused, nothing lost.
  std::vector<uint8_t> big(512 << 10), dst2(512 << 10, kPoison);
  fillRandom(big, rng);
  EXPECT_EQ(net->isendStream(l.send, big.data(), big.size(), 0, 0, nullptr, &req),
            ncclInvalidArgument);
  rreq = postRecv(l, dst2.data(), dst2.size());
  sreq = postStream(l, big.data(), big.size(), 128 << 10, 128 << 10);
  EXPECT_EQ(net->sendReady(sreq, 64 << 10), ncclInvalidArgument);
  EXPECT_EQ(net->sendReady(sreq, (512 << 10) + 1), ncclInvalidArgument);
  ASSERT_EQ(net->sendReady(sreq, big.size()), ncclSuccess);
  ASSERT_TRUE(waitPair(l, sreq, rreq, &sent, &got));
  ASSERT_EQ(got, big.size());
  EXPECT_EQ(firstBadByte(dst2, big, got), -1);
}

// A receiver that leaves while the send is half ready: the send fails, it
// does not wait for the rest forever.
TEST(SocketNetStream, ReceiverLeavingFailsAHalfReadySend) {
  test::Rng rng(test::testSeed());
  auto net = makeNet(loParams(2, 2));
  ASSERT_TRUE(net);
  Link l{net.get(), net.get()};
  ASSERT_TRUE(connectLink(&l));
  std::vector<uint8_t> src(1 << 20), dst(1 << 20, kPoison);
  fillRandom(src, rng);
  void* rreq = postRecv(l, dst.data(), dst.size());
  void* sreq = postStream(l, src.data(), src.size(), 256 << 10, 256 << 10);
  size_t prefix = 0;
  ASSERT_TRUE(pollUntil([&] {
    EXPECT_EQ(net->recvPrefix(rreq, &prefix), ncclSuccess);
    return prefix >= (256u << 10);
  }));
  (void)rreq;
  ASSERT_EQ(net->closeRecv(l.recv), ncclSuccess);
  l.recv = nullptr;
  Status s = ncclSuccess;
  size_t sent = 0;
  ASSERT_TRUE(waitRequest(net.get(), sreq, &sent, &s));
  EXPECT_NE(s, ncclSuccess);
}

// ------------------------------------------------------------ ring hops

constexpr uint32_t kSlots = 8;
constexpr uint64_t kSlot = 48 << 10;  // one slot rides inline, two or more stream

uint64_t loadAcq(const uint64_t& w) {
  return std::atomic_ref<const uint64_t>(w).load(std::memory_order_acquire);
}
void storeRel(uint64_t& w, uint64_t v) {
  std::atomic_ref<uint64_t>(w).store(v, std::memory_order_release);
}

// Both ends of one hop pair and the two "kernels" (this thread).
struct HopPair {
  std::unique_ptr<NetEngine> net;
  RingHop send, recv;
  std::vector<char> sendFifo = std::vector<char>(kSlots * kSlot);
  std::vector<char> recvFifo = std::vector<char>(kSlots * kSlot, static_cast<char>(kPoison));
  uint64_t sizes[kSlots] = {};
  uint64_t tail = 0, sendHead = 0;  // sending kernel's tail, its head (the hop's)
  uint64_t recvTail = 0, drained = 0;

  ::testing::AssertionResult open(uint32_t group) {
    net = makeNet(loParams(2, 2), pieces(16 << 10));
    Link l{net.get(), net.get()};
    auto made = connectLink(&l);
    if (!made) return made;
    for (RingHop* h : {&send, &recv}) {
      h->isSend = h == &send;
      h->peer = 1;
      h->channel = 0;
      h->link = std::make_unique<NetLink>(net.get(), 0, h->isSend);
      h->link->comm = h->isSend ? l.send : l.recv;
      h->nslots = kSlots;
      h->slotBytes = kSlot;
      h->groupSlots = group;
      h->fifo = h->isSend ? sendFifo.data() : recvFifo.data();
      if (h->link->regMr(h->fifo, kSlots * kSlot, &h->mhandle) != ncclSuccess) {
        return ::testing::AssertionFailure() << "regMr";
      }
    }
    l.send = l.recv = nullptr;  // the hops' links own them now
    send.kernelWord = &tail;
    send.proxyWord = &sendHead;
    send.sizes = sizes;
    recv.kernelWord = &drained;
    recv.proxyWord = &recvTail;
    return ::testing::AssertionSuccess();
  }

  // Steps both hops until `done` holds (false after the time budget or a
  // hop error).
  template <typename F>
  bool stepUntil(F done) {
    return pollUntil([&] {
      bool moved = false;
      if (send.step(&moved) != ncclSuccess || recv.step(&moved) != ncclSuccess) return true;
      return done();
    });
  }
};

// Primitives of 1..4 slots (random bytes, a short last slot), the sending
// kernel writing slot j of a primitive only once the receiving kernel has
// slot j - 1: a hop that shipped a step only when all of it is written
// would never finish. The receiving kernel checks every slot's bytes and
// that the rest of the slot kept its poison.
void runLockstep(uint32_t group, int primitives) {
  test::Rng rng(test::testSeed());
  HopPair p;
  ASSERT_TRUE(p.open(group));
  uint64_t step = 0;
  std::vector<uint8_t> data(4 * kSlot);
  for (int prim = 0; prim < primitives; ++prim) {
    const uint64_t n = 1 + rng.below(4 * kSlot);
    fillRandom(data, rng);
    const uint64_t slots = (n + kSlot - 1) / kSlot;
    for (uint64_t j = 0; j < slots; ++j, ++step) {
      // Sender: the slot must be free, and the previous slot received.
      ASSERT_TRUE(p.stepUntil([&] {
        return loadAcq(p.sendHead) + kSlots >= step + 1 && (j == 0 || loadAcq(p.recvTail) >= step);
      })) << "primitive "
          << prim << " slot " << j << " (step " << step << ") never went ahead";
      const uint64_t off = j * kSlot;
      const uint64_t len = std::min(kSlot, n - off);
      memcpy(p.sendFifo.data() + (step % kSlots) * kSlot, data.data() + off, len);
      p.sizes[step % kSlots] = n - off;  // what the kernel notes: bytes left
      storeRel(p.tail, step + 1);
      // Receiver: the slot arrives; check it, poison it, hand it back.
      ASSERT_TRUE(p.stepUntil([&] { return loadAcq(p.recvTail) >= step + 1; }))
          << "step " << step << " never arrived";
      char* got = p.recvFifo.data() + (step % kSlots) * kSlot;
      ASSERT_EQ(memcmp(got, data.data() + off, len), 0) << "step " << step;
      for (uint64_t b = len; b < kSlot; ++b) {
        ASSERT_EQ(static_cast<uint8_t>(got[b]), kPoison) << "step " << step << " byte " << b;
      }
      memset(got, kPoison, kSlot);
      storeRel(p.drained, step + 1);
    }
  }
  ASSERT_TRUE(p.stepUntil([&] { return p.send.flushed(); }));
  EXPECT_FALSE(p.send.failed || p.recv.failed);
}

TEST(RingHopStream, SlotsReachTheNextKernelBeforeTheStepIsWritten) {
  runLockstep(4, 60);
  runLockstep(3, 60);  // messages cut short at the FIFO's end
}

TEST(RingHopStream, GroupsOfTwo) {
  runLockstep(2, 40);
}

// Without streaming (one message per slot) the same lockstep runs too: the
// test's kernels are not what makes it pass.
TEST(RingHopStream, OneMessagePerSlot) {
  runLockstep(1, 30);
}

}  // namespace
}  // namespace ferry::net
