// The SM-free rendezvous (enqueue/rendezvous.h, protocol in
// transport/ctrl_block.h) on a control block in plain memory: two threads
// play sender and receiver over thousands of messages in random timing.
// Exactly one side is first for every message, the second side reads
// exactly what the first published, slots are reused only after their
// previous message completed, and errors, aborts and timeouts end waits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/random.h"
#include "enqueue/rendezvous.h"

namespace ferry {
namespace {

PostInfo infoFor(bool sender, uint64_t seq) {
  PostInfo p{};
  p.bytes = seq * 3 + 1;
  p.kind = static_cast<uint32_t>(PostKind::Ipc);
  p.allocId = (seq << 1) | (sender ? 1 : 0);
  p.offset = seq ^ 0x5a5a;
  for (int i = 0; i < 64; ++i) p.ipc[i] = static_cast<uint8_t>(seq * 7 + i + (sender ? 100 : 0));
  return p;
}

bool sameInfo(const PostInfo& a, const PostInfo& b) {
  return a.bytes == b.bytes && a.kind == b.kind && a.allocId == b.allocId && a.offset == b.offset &&
         std::equal(a.ipc, a.ipc + 64, b.ipc);
}

// One side of the connection: claims every message in order; as the second
// side it checks the peer's info and "copies" (writes done); as the first it
// leaves done to the peer.
void playSide(CtrlBlock* ctrl, bool sender, uint64_t messages, uint64_t seed,
              std::vector<uint8_t>* firstBy, std::atomic<int>* errors) {
  test::Rng rng(seed, sender ? 1 : 2);
  RendezvousLimits limits{int64_t{20} * 1000000000, nullptr, 0};
  for (uint64_t seq = 0; seq < messages; ++seq) {
    if (rng.below(16) == 0) std::this_thread::yield();
    if (awaitSlot(*ctrl, seq, limits) != ncclSuccess) {
      ++*errors;
      return;
    }
    bool first = false;
    PostInfo peer{};
    if (claimMessage(*ctrl, sender, seq, infoFor(sender, seq), &first, &peer) != ncclSuccess) {
      ++*errors;
      return;
    }
    if (first) {
      (*firstBy)[seq] = sender ? 1 : 2;
      continue;
    }
    if (!sameInfo(peer, infoFor(!sender, seq))) ++*errors;
    slotOf(*ctrl, seq).done.store(generationOf(seq));
  }
}

TEST(Rendezvous, ExactlyOneSideIsFirstAndTheSecondReadsItsInfo) {
  for (int round = 0; round < 4; ++round) {
    auto ctrl = std::make_unique<CtrlBlock>();
    const uint64_t messages = 20 * kMsgSlots + 17;
    std::vector<uint8_t> bySender(messages, 0), byReceiver(messages, 0);
    std::atomic<int> errors{0};
    uint64_t seed = test::testSeed() + static_cast<uint64_t>(round);
    std::thread s(playSide, ctrl.get(), true, messages, seed, &bySender, &errors);
    std::thread r(playSide, ctrl.get(), false, messages, seed, &byReceiver, &errors);
    s.join();
    r.join();
    ASSERT_EQ(errors.load(), 0);
    uint64_t senderFirst = 0;
    for (uint64_t k = 0; k < messages; ++k) {
      ASSERT_EQ((bySender[k] != 0) + (byReceiver[k] != 0), 1) << "message " << k;
      senderFirst += bySender[k] != 0;
      ASSERT_TRUE(messageMatched(*ctrl, k) || k + kMsgSlots < messages);
    }
    EXPECT_GT(messages, senderFirst);  // both roles occur (not a constant outcome)
  }
}

TEST(Rendezvous, SecondSideSeesPostedInfoWithoutClaiming) {
  auto ctrl = std::make_unique<CtrlBlock>();
  bool first = false;
  PostInfo peer{};
  ASSERT_EQ(claimMessage(*ctrl, false, 0, infoFor(false, 0), &first, &peer), ncclSuccess);
  ASSERT_TRUE(first);
  PostInfo seen{};
  ASSERT_FALSE(peerPosted(*ctrl, false, 0, &seen));  // own claim is not the peer's
  ASSERT_TRUE(peerPosted(*ctrl, true, 0, &seen));
  EXPECT_TRUE(sameInfo(seen, infoFor(false, 0)));
  EXPECT_FALSE(messageMatched(*ctrl, 0));
  ASSERT_EQ(claimMessage(*ctrl, true, 0, PostInfo{}, &first, &peer), ncclSuccess);
  EXPECT_FALSE(first);
  EXPECT_TRUE(sameInfo(peer, infoFor(false, 0)));
  EXPECT_TRUE(messageMatched(*ctrl, 0));
  EXPECT_FALSE(messageDone(*ctrl, 0));
}

TEST(Rendezvous, SlotReuseWaitsForThePreviousMessage) {
  auto ctrl = std::make_unique<CtrlBlock>();
  bool first = false;
  PostInfo peer{};
  // The sender runs a full window ahead of a receiver that never comes.
  for (uint64_t k = 0; k < kMsgSlots; ++k) {
    ASSERT_TRUE(slotReusable(*ctrl, k));
    ASSERT_EQ(claimMessage(*ctrl, true, k, infoFor(true, k), &first, &peer), ncclSuccess);
    ASSERT_TRUE(first);
  }
  EXPECT_FALSE(slotReusable(*ctrl, kMsgSlots));
  RendezvousLimits limits{int64_t{50} * 1000000, nullptr, 1};
  EXPECT_EQ(awaitSlot(*ctrl, kMsgSlots, limits), ncclSystemError);
  // Claimed by both but its copy not landed: still not reusable.
  ASSERT_EQ(claimMessage(*ctrl, false, 0, PostInfo{}, &first, &peer), ncclSuccess);
  EXPECT_FALSE(slotReusable(*ctrl, kMsgSlots));
  slotOf(*ctrl, 0).done.store(1);
  EXPECT_TRUE(slotReusable(*ctrl, kMsgSlots));
  EXPECT_EQ(awaitSlot(*ctrl, kMsgSlots, limits), ncclSuccess);
}

TEST(Rendezvous, ErrorsAndAbortEndTheWait) {
  auto ctrl = std::make_unique<CtrlBlock>();
  bool first = false;
  PostInfo peer{};
  for (uint64_t k = 0; k < kMsgSlots; ++k) {
    ASSERT_EQ(claimMessage(*ctrl, true, k, infoFor(true, k), &first, &peer), ncclSuccess);
  }
  std::atomic<bool> abort{true};
  RendezvousLimits aborted{0, &abort, 1};
  EXPECT_EQ(awaitSlot(*ctrl, kMsgSlots, aborted), ncclInvalidUsage);
  ctrl->error.store(ncclSystemError);
  RendezvousLimits forever{0, nullptr, 1};
  EXPECT_EQ(awaitSlot(*ctrl, kMsgSlots, forever), ncclRemoteError);
}

// The bounded wait of an exchange's send (FERRY_P2P_PUSH_WAIT_US): it ends
// as soon as the receiver claims (then the sender is second and pushes),
// after its bound when the receiver stays away, and at once on abort.
TEST(Rendezvous, AwaitPeerClaimEndsOnClaimBoundOrAbort) {
  auto ctrl = std::make_unique<CtrlBlock>();
  const int64_t tenSeconds = int64_t{10} * 1000000000;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(awaitPeerClaim(*ctrl, true, 0, 2000000, nullptr));  // 2 ms, nobody comes
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2));
  std::atomic<bool> abort{true};
  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(awaitPeerClaim(*ctrl, true, 0, tenSeconds, &abort));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  std::thread receiver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bool first = false;
    PostInfo peer{};
    EXPECT_EQ(claimMessage(*ctrl, false, 0, infoFor(false, 0), &first, &peer), ncclSuccess);
    EXPECT_TRUE(first);
  });
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(awaitPeerClaim(*ctrl, true, 0, tenSeconds, nullptr));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  receiver.join();
  bool first = true;
  PostInfo peer{};
  ASSERT_EQ(claimMessage(*ctrl, true, 0, infoFor(true, 0), &first, &peer), ncclSuccess);
  EXPECT_FALSE(first);
  EXPECT_TRUE(sameInfo(peer, infoFor(false, 0)));
  // A claim by the sender itself is not the receiver's.
  ASSERT_EQ(claimMessage(*ctrl, true, 1, infoFor(true, 1), &first, &peer), ncclSuccess);
  EXPECT_TRUE(first);
  EXPECT_FALSE(awaitPeerClaim(*ctrl, true, 1, 1000000, nullptr));
  EXPECT_TRUE(awaitPeerClaim(*ctrl, false, 1, 1000000, nullptr));
}

TEST(Rendezvous, DisagreeingSequencesAreAnInternalError) {
  auto ctrl = std::make_unique<CtrlBlock>();
  bool first = false;
  PostInfo peer{};
  // The peer claimed message kMsgSlots + 3 in slot 3: message 3 cannot be claimed.
  slotOf(*ctrl, 3).claim.store((generationOf(kMsgSlots + 3) << 2) | kClaimReceiver);
  EXPECT_EQ(claimMessage(*ctrl, true, 3, infoFor(true, 3), &first, &peer), ncclInternalError);
}

}  // namespace
}  // namespace ferry
