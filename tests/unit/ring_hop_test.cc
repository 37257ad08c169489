// A receive hop of the LL ring across hosts (proxy/ring_hop.h) against a
// scripted engine: lines land in the hop's landing buffer and reach the
// FIFO slot whole words at a time, only as many bytes as arrived; a step
// that is not whole 16-byte lines fails the hop; receives are posted only
// into slots the kernel drained.
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/null_net_engine.h"
#include "proxy/ring_hop.h"

namespace ferry {
namespace {

// Each irecv is remembered; test() completes the oldest one by writing
// the scripted bytes into its buffer (what the sender shipped).
class ScriptedRecvEngine final : public NullNetEngine {
 public:
  struct Posted {
    char* at;
    size_t room;
  };
  std::deque<Posted> posted;
  std::deque<std::vector<uint64_t>> arrivals;  // words of each next arrival

  Status irecv(void*, int n, void** data, size_t* sizes, int*, void**, void** request) override {
    if (n != 1) return ncclInternalError;
    posted.push_back({static_cast<char*>(data[0]), sizes[0]});
    *request = &posted.back();
    return ncclSuccess;
  }
  Status test(void* request, int* done, size_t* size) override {
    if (posted.empty() || request != &posted.front()) return ncclInternalError;  // in order
    if (arrivals.empty()) {
      *done = 0;
      return ncclSuccess;
    }
    const std::vector<uint64_t>& w = arrivals.front();
    const size_t bytes = w.size() * sizeof(uint64_t);
    if (bytes > posted.front().room) return ncclInternalError;
    memcpy(posted.front().at, w.data(), bytes);
    *done = 1;
    *size = bytes;
    arrivals.pop_front();
    posted.pop_front();
    return ncclSuccess;
  }
};

constexpr uint32_t kSlots = 2;
constexpr uint64_t kSlotBytes = 128;  // 8 LL lines
constexpr size_t kSlotWords = kSlotBytes / sizeof(uint64_t);

struct LlReceiveHop {
  ScriptedRecvEngine engine;
  std::vector<uint64_t> fifo = std::vector<uint64_t>(kSlots * kSlotWords);
  uint64_t drained = 0;  // the kernel's recvHead
  RingHop hop;
  int comm = 0;

  LlReceiveHop() {
    hop.isSend = false;
    hop.peer = 1;
    hop.channel = 0;
    hop.landing = std::make_unique<uint64_t[]>(kSlots * kSlotWords);
    hop.link = std::make_unique<NetLink>(&engine, 0, false);
    hop.link->comm = &comm;
    hop.fifo = reinterpret_cast<char*>(fifo.data());
    hop.slotBytes = kSlotBytes;
    hop.nslots = kSlots;
    hop.kernelWord = &drained;
    hop.proxyWord = nullptr;  // LL: no tail
  }
};

std::vector<uint64_t> randomWords(std::mt19937_64& rng, size_t n) {
  std::vector<uint64_t> w(n);
  for (uint64_t& x : w) x = rng() | 1;  // never zero: a word that did not land stays 0
  return w;
}

TEST(RingHopLl, LinesLandInTheirSlotAndOnlyWhatArrived) {
  std::mt19937_64 rng(std::random_device{}());
  LlReceiveHop h;
  bool moved = false;
  ASSERT_EQ(h.hop.step(&moved), ncclSuccess);
  // Both slots free: two receives posted, into the landing buffer.
  ASSERT_EQ(h.engine.posted.size(), 2u);
  EXPECT_EQ(h.engine.posted[0].at, reinterpret_cast<char*>(h.hop.landing.get()));
  EXPECT_EQ(h.engine.posted[1].at, reinterpret_cast<char*>(h.hop.landing.get()) + kSlotBytes);
  EXPECT_EQ(h.engine.posted[0].room, kSlotBytes);
  // Step 0 carries 3 lines, step 1 a whole slot.
  const std::vector<uint64_t> a = randomWords(rng, 6), b = randomWords(rng, kSlotWords);
  h.engine.arrivals = {a, b};
  moved = false;
  ASSERT_EQ(h.hop.step(&moved), ncclSuccess);
  EXPECT_TRUE(moved);
  EXPECT_EQ(h.hop.done, 2u);
  for (size_t i = 0; i < kSlotWords; ++i) {
    EXPECT_EQ(h.fifo[i], i < a.size() ? a[i] : 0) << "slot 0 word " << i;
    EXPECT_EQ(h.fifo[kSlotWords + i], b[i]) << "slot 1 word " << i;
  }
  // Nothing more is posted until the kernel drains step 0.
  EXPECT_TRUE(h.engine.posted.empty());
  ASSERT_EQ(h.hop.step(&moved), ncclSuccess);
  EXPECT_TRUE(h.engine.posted.empty());
  h.drained = 1;
  ASSERT_EQ(h.hop.step(&moved), ncclSuccess);
  ASSERT_EQ(h.engine.posted.size(), 1u);  // step 2 into slot 0
  EXPECT_EQ(h.engine.posted[0].at, reinterpret_cast<char*>(h.hop.landing.get()));
  const std::vector<uint64_t> c = randomWords(rng, 4);
  h.engine.arrivals = {c};
  ASSERT_EQ(h.hop.step(&moved), ncclSuccess);
  for (size_t i = 0; i < kSlotWords; ++i) {
    // Step 2's two lines over step 0's first two; step 0's third line stays.
    EXPECT_EQ(h.fifo[i], i < c.size() ? c[i] : i < a.size() ? a[i] : 0) << "word " << i;
  }
}

TEST(RingHopLl, AStepOfPartialLinesFailsTheHop) {
  LlReceiveHop h;
  bool moved = false;
  ASSERT_EQ(h.hop.step(&moved), ncclSuccess);
  h.engine.arrivals = {{1, 2, 3}};  // 24 bytes: a line and a half
  EXPECT_EQ(h.hop.step(&moved), ncclRemoteError);
  EXPECT_TRUE(h.hop.failed);
  for (uint64_t w : h.fifo) EXPECT_EQ(w, 0u);  // nothing of it landed
}

}  // namespace
}  // namespace ferry
