// The host side of one message's rendezvous (transport/ctrl_block.h): the
// user's thread claims the message's slot inside the API call and learns
// whether it is first (it publishes where its bytes are, and its stream
// waits for the peer's copy) or second (it reads where the peer's bytes are,
// and copies them itself). Pure host logic over a CtrlBlock: unit-tested on
// plain memory (tests/unit/rendezvous_test.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "core/status.h"
#include "runtime/runtime.h"
#include "transport/ctrl_block.h"

namespace ferry {

struct RendezvousLimits {
  int64_t timeoutNs = 0;                         // 0: wait for slot reuse forever
  const std::atomic<bool>* abortFlag = nullptr;  // the communicator's abort
  int peer = -1;                                 // for messages
};

MsgSlot& slotOf(CtrlBlock& ctrl, uint64_t seq);

// Describes bytes at `ptr` inside the mappable allocation `a` for a peer
// process (PostKind::Ipc; the peer maps the whole allocation once).
void postIpc(const rt::AllocationInfo& a, const void* ptr, PostInfo* out);
inline uint64_t generationOf(uint64_t seq) {
  return seq + 1;
}

// Whether slot (seq % kMsgSlots) may carry message `seq`: its previous
// generation was claimed by both sides and its copy has landed.
bool slotReusable(CtrlBlock& ctrl, uint64_t seq);

// Waits (sleeping with backoff; WARN once after 5 s) until the slot of
// message `seq` is reusable. ncclRemoteError when the peer reported an
// error, ncclSystemError on timeout, ncclInvalidUsage on abort.
[[nodiscard]] Status awaitSlot(CtrlBlock& ctrl, uint64_t seq, const RendezvousLimits& limits);

// True when the other side has already claimed message `seq` (this side is
// then second): *peer receives its PostInfo.
bool peerPosted(CtrlBlock& ctrl, bool sender, uint64_t seq, PostInfo* peer);

// Spins up to `waitNs` (or until abort) for the other side to claim message
// `seq`; true when it has. Never fails: the caller then claims as usual.
bool awaitPeerClaim(CtrlBlock& ctrl, bool sender, uint64_t seq, int64_t waitNs,
                    const std::atomic<bool>* abortFlag);

// Publishes `mine` and claims message `seq` for this side. *first = true:
// this side was first (the peer will read `mine`). *first = false: the peer
// claimed in between; *peer receives its PostInfo and `mine` is unused.
// Call after awaitSlot. ncclInternalError if the slot holds a generation
// this message cannot follow (the two sides disagree on the sequence).
[[nodiscard]] Status claimMessage(CtrlBlock& ctrl, bool sender, uint64_t seq, const PostInfo& mine,
                                  bool* first, PostInfo* peer);

// Whether both sides have claimed message `seq` (it is matched).
bool messageMatched(CtrlBlock& ctrl, uint64_t seq);
// Whether message `seq`'s copy has landed (done >= its generation).
bool messageDone(CtrlBlock& ctrl, uint64_t seq);

}  // namespace ferry
