// One posted point-to-point operation: a state machine the proxy thread
// advances with progress() until it returns something other than
// ncclInProgress. It never waits inside progress(): every step that needs
// the peer (a posted receive, a free slot, a filled slot) returns
// ncclInProgress and is retried on the next pass, so no operation ever holds
// up another (no head-of-line blocking across connections).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "runtime/runtime.h"
#include "transport/connection.h"

namespace ferry {

struct P2pOp {
  enum class Kind { Send, Recv };
  enum class State { Start, MapPeer, WaitPeerReady, Fifo };

  Kind kind = Kind::Send;
  State state = State::Start;
  const void* owner = nullptr;  // the communicator (for detach)
  rt::Runtime* runtime = nullptr;
  SendConnection* send = nullptr;  // kind == Send
  RecvConnection* recv = nullptr;  // kind == Recv
  uint64_t seq = 0;
  char* buffer = nullptr;  // sendbuff or recvbuff
  uint64_t bytes = 0;
  RdvMode mode = RdvMode::Fifo;  // receives: decided at enqueue
  // Zero-copy receives (ZeroCopyIpc): the allocation the buffer lies in.
  rt::AllocationInfo alloc;
  // Recorded on the user's stream at enqueue; the copy stream waits on it
  // before touching the user's buffer. Dropped once that wait is issued.
  std::shared_ptr<rt::Event> ready;
  bool readyIssued = false;
  // Staged sends: the user's stream copies the payload into `buffer` in
  // pieces of `stagePiece` bytes and records staged[j] after piece j. The
  // copy stream waits on a piece's event just before it first reads from
  // that piece, so the transfer starts after the first piece is staged, not
  // after the whole message (empty: not staged; `ready` covers the buffer).
  std::vector<std::shared_ptr<rt::Event>> staged;
  uint64_t stagePiece = 0;
  size_t stagedWaited = 0;  // events [0, stagedWaited) are waited on
  // Zero-copy sends may make the copy stream itself wait for the receiver's
  // recvReady (a stream wait on a host word) instead of the proxy polling it,
  // so back-to-back messages pipeline. Only when no stream wait can stall a
  // lazy module load (eager loading or the host runtime); see p2p_engine.h.
  bool streamWaitsPeer = false;
  // Progress through the message.
  uint64_t offset = 0;
  char* peerDst = nullptr;  // zero-copy destination, once mapped
  bool fetching = false;    // an RPC for the peer allocation's fd is in flight
  int64_t startNs = 0;      // when the op reached the head of its connection
  int64_t timeoutNs = 0;    // FERRY_P2P_TIMEOUT; 0: wait for the peer forever
  // Where failures are reported (the communicator's async error).
  std::atomic<Status>* asyncError = nullptr;
};

// Advances `op` as far as it can go now. ncclSuccess: its last stream
// operation is enqueued (the op can be dropped); ncclInProgress: waiting on
// the peer; anything else: failed (the caller reports it).
[[nodiscard]] Status progressOp(P2pOp& op, bool* progressed);

// Releases every stream wait the op's user stream may be blocked on for this
// connection (used on abort and on failure) so no user stream hangs.
void releaseConnectionWaits(ConnectionBase& conn);

}  // namespace ferry
