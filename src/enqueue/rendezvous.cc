#include "enqueue/rendezvous.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/clock.h"

namespace ferry {
namespace {

constexpr uint64_t kBitsMask = kClaimSender | kClaimReceiver;

uint64_t claimGen(uint64_t w) {
  return w >> 2;
}

uint64_t myBit(bool sender) {
  return sender ? kClaimSender : kClaimReceiver;
}

}  // namespace

void postIpc(const rt::AllocationInfo& a, const void* ptr, PostInfo* out) {
  out->kind = static_cast<uint32_t>(PostKind::Ipc);
  out->ipcType = static_cast<uint32_t>(a.ipc.type);
  out->allocId = a.allocId;
  out->allocSize = a.size;
  out->offset = reinterpret_cast<uint64_t>(ptr) - a.base;
  memcpy(out->ipc, a.ipc.bytes, sizeof(out->ipc));
}

MsgSlot& slotOf(CtrlBlock& ctrl, uint64_t seq) {
  return ctrl.slot[seq % kMsgSlots];
}

bool slotReusable(CtrlBlock& ctrl, uint64_t seq) {
  if (seq < kMsgSlots) return true;  // first use of the slot
  MsgSlot& s = slotOf(ctrl, seq);
  const uint64_t prev = generationOf(seq) - kMsgSlots;
  // Acquire: the peer's reads of our previous info happened before its bit.
  uint64_t w = s.claim.load();
  if (claimGen(w) > prev) return true;  // claimed for this message already (by the peer)
  return claimGen(w) == prev && (w & kBitsMask) == kBitsMask && s.done.load() >= prev;
}

Status awaitSlot(CtrlBlock& ctrl, uint64_t seq, const RendezvousLimits& limits) {
  if (slotReusable(ctrl, seq)) return ncclSuccess;
  const int64_t start = steadyNowNs();
  bool warned = false;
  auto nap = std::chrono::microseconds(5);
  while (!slotReusable(ctrl, seq)) {
    uint64_t e = ctrl.error.load();
    if (e != 0) {
      FERRY_FAIL(ncclRemoteError, "peer %d reported a failure on this connection: %s", limits.peer,
                 statusString(static_cast<Status>(e)));
    }
    if (limits.abortFlag != nullptr && limits.abortFlag->load(std::memory_order_acquire)) {
      FERRY_FAIL(ncclInvalidUsage, "communicator aborted while a send/recv waited for a slot");
    }
    const int64_t waited = steadyNowNs() - start;
    if (!warned && waited > int64_t{5} * 1000000000) {
      FERRY_WARN(
          "message %llu with peer %d waits for message %llu to complete: this rank is %d "
          "messages ahead of its peer on this connection",
          static_cast<unsigned long long>(seq), limits.peer,
          static_cast<unsigned long long>(seq - kMsgSlots), kMsgSlots);
      warned = true;
    }
    if (limits.timeoutNs > 0 && waited > limits.timeoutNs) {
      FERRY_FAIL(ncclSystemError,
                 "message %llu with peer %d: message %llu did not complete within "
                 "FERRY_P2P_TIMEOUT",
                 static_cast<unsigned long long>(seq), limits.peer,
                 static_cast<unsigned long long>(seq - kMsgSlots));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(1000));
  }
  return ncclSuccess;
}

bool peerPosted(CtrlBlock& ctrl, bool sender, uint64_t seq, PostInfo* peer) {
  MsgSlot& s = slotOf(ctrl, seq);
  // Acquire: pairs with the peer's release CAS, so its PostInfo is visible.
  uint64_t w = s.claim.value.load(std::memory_order_acquire);
  uint64_t other = myBit(!sender);
  if (claimGen(w) != generationOf(seq) || (w & other) == 0) return false;
  *peer = sender ? s.recvInfo : s.sendInfo;
  return true;
}

bool awaitPeerClaim(CtrlBlock& ctrl, bool sender, uint64_t seq, int64_t waitNs,
                    const std::atomic<bool>* abortFlag) {
  PostInfo unused;
  const int64_t start = steadyNowNs();
  while (!peerPosted(ctrl, sender, seq, &unused)) {
    if (steadyNowNs() - start >= waitNs) return false;
    if (abortFlag != nullptr && abortFlag->load(std::memory_order_acquire)) return false;
    if (ctrl.error.load() != 0) return false;
    std::this_thread::yield();
  }
  return true;
}

Status claimMessage(CtrlBlock& ctrl, bool sender, uint64_t seq, const PostInfo& mine, bool* first,
                    PostInfo* peer) {
  MsgSlot& s = slotOf(ctrl, seq);
  const uint64_t gen = generationOf(seq);
  (sender ? s.sendInfo : s.recvInfo) = mine;  // plain stores, published by the CAS below
  uint64_t w = s.claim.value.load(std::memory_order_acquire);
  for (;;) {
    if (claimGen(w) == gen) {
      // The peer claimed in between: become second. Mark our bit (release:
      // the slot's next user sees that we have read the peer's info).
      if ((w & myBit(sender)) != 0 || (w & myBit(!sender)) == 0) {
        FERRY_FAIL(ncclInternalError, "message %llu: slot claimed twice by one side",
                   static_cast<unsigned long long>(seq));
      }
      *peer = sender ? s.recvInfo : s.sendInfo;
      s.claim.value.fetch_or(myBit(sender), std::memory_order_acq_rel);
      *first = false;
      return ncclSuccess;
    }
    if (claimGen(w) >= gen || claimGen(w) + kMsgSlots < gen) {
      FERRY_FAIL(ncclInternalError,
                 "message %llu: its slot holds generation %llu (the two sides disagree on the "
                 "message order)",
                 static_cast<unsigned long long>(seq),
                 static_cast<unsigned long long>(claimGen(w)));
    }
    // Release: our PostInfo is visible to whoever acquires the new claim.
    if (s.claim.value.compare_exchange_weak(w, (gen << 2) | myBit(sender),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
      *first = true;
      return ncclSuccess;
    }
  }
}

bool messageMatched(CtrlBlock& ctrl, uint64_t seq) {
  uint64_t w = slotOf(ctrl, seq).claim.load();
  return claimGen(w) > generationOf(seq) ||
         (claimGen(w) == generationOf(seq) && (w & kBitsMask) == kBitsMask);
}

bool messageDone(CtrlBlock& ctrl, uint64_t seq) {
  return slotOf(ctrl, seq).done.load() >= generationOf(seq);
}

}  // namespace ferry
