// The control block of one SM-free connection (sender S -> receiver R): a
// small region of host shared memory mapped by both processes and registered
// with both runtimes, so CPUs (proxies) and GPU streams (stream memory
// operations) of either side can read and write its words.
//
// Every counter is a 64-bit monotonic count (messages > 4 GiB and > 2^31
// steps work; nothing wraps in practice). Each counter has exactly ONE
// writer, named below, and lives on its own cache line.
//
// Protocol for message k (k = 0, 1, ... per connection, the k-th send from S
// to R matches the k-th recv of R from S, as in NCCL):
//   R proxy:  fills rdv[k % kRdvSlots] (mode, bytes, where to write), then
//             recvPosted = k+1 (CPU store, release: publishes rdv to S).
//             It may do so only while k < rdvConsumed + kRdvSlots.
//   R stream: (zero-copy only) recvReady = k+1 when R's user stream reaches
//             the recv (stream write: everything before it on R's stream is
//             complete, so S may now overwrite the receive buffer). Receives
//             may sit on different user streams: a write from another stream
//             than the previous write's first waits (event) for that one, so
//             the word never moves backwards (P2pEngine::makeRecvOp).
//   S proxy:  waits recvPosted > k (acquire), reads rdv, rdvConsumed = k+1
//             (CPU store, release: the rdv slot may be reused).
//   zero-copy: S stream copies sendbuff -> R's buffer, then writes
//             zcDone = k+1 (R's user stream waits on it) and sendDone = k+1
//             (S's user stream waits on it). Stream writes are ordered after
//             the copy and carry a memory barrier: the data is visible first.
//   FIFO:     for each chunk c (global chunk count of the connection):
//             S waits tail_issued - head < nslots (head: acquire load),
//             writes slotBytes[c % nslots] (CPU), S stream copies the chunk
//             into R's slot, then writes tail = c+1.
//             R waits tail > c (acquire), R stream copies slot -> recvbuff
//             and writes head = c+1; after the last chunk of the message R
//             stream writes fifoDone = k+1. S stream writes sendDone = k+1
//             after its last chunk copy.
//   R decides the mode of message k when the recv is enqueued, so its user
//   stream waits on the one word that mode completes (zcDone or fifoDone).
//   Two words, not one: a zero-copy message k+1 may land before the FIFO
//   copy-out of message k, and one shared word would then release R's stream
//   for k too early.
//   errors:   either side stores a nonzero code in `error` (release); the
//             other side's proxy fails the connection's pending ops.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry {

constexpr uint64_t kCtrlMagic = 0x4665727279437472ULL;  // "FerryCtr"
constexpr uint32_t kCtrlVersion = 1;
constexpr int kMaxSlots = 64;
constexpr int kRdvSlots = 32;

// Counters are read and written as 64-bit atomics by CPUs and as plain
// 64-bit words by GPU stream memory operations; both are single-copy atomic
// for aligned 8-byte words.
struct alignas(64) CtrlWord {
  std::atomic<uint64_t> value;
  char pad[64 - sizeof(std::atomic<uint64_t>)];

  uint64_t load() const { return value.load(std::memory_order_acquire); }
  void store(uint64_t v) { value.store(v, std::memory_order_release); }
  // The address GPU stream operations use (after host registration).
  uint64_t* raw() { return reinterpret_cast<uint64_t*>(&value); }
};
static_assert(sizeof(CtrlWord) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters need lock-free atomics");

enum class RdvMode : uint32_t { Fifo = 1, ZeroCopyIpc = 2, ZeroCopyLocal = 3 };

// Where R wants message k written. Written by R's proxy before recvPosted.
struct alignas(64) Rendezvous {
  uint64_t seq;        // k
  uint64_t bytes;      // R's receive size; S checks it equals its send size
  uint32_t mode;       // RdvMode
  uint32_t ipcType;    // rt::IpcDescriptor::Type of the allocation (ZeroCopyIpc)
  uint64_t allocId;    // R's allocation id (ZeroCopyIpc: key of S's mapping cache)
  uint64_t allocSize;  // size of that allocation
  uint64_t offset;     // of the receive buffer inside the allocation
  uint64_t localPtr;   // ZeroCopyLocal: the receive buffer itself (same process)
  uint8_t ipc[64];     // the allocation's IPC handle bytes (ZeroCopyIpc, CUDA)
};

struct CtrlBlock {
  uint64_t magic;
  uint32_t version;
  uint32_t nslots;
  uint64_t chunkBytes;
  // Written by S.
  CtrlWord tail;                  // S stream
  CtrlWord rdvConsumed;           // S proxy (CPU)
  CtrlWord sendDone;              // S stream; S's user stream waits on it
  CtrlWord zcDone;                // S stream; R's user stream waits on it (zero-copy messages)
  CtrlWord error;                 // either side (CPU); first nonzero wins
  uint64_t slotBytes[kMaxSlots];  // S proxy (CPU), before the chunk copy
  // Written by R.
  CtrlWord head;        // R stream
  CtrlWord recvPosted;  // R proxy (CPU)
  CtrlWord recvReady;   // R stream (zero-copy receives)
  CtrlWord fifoDone;    // R stream; R's user stream waits on it (FIFO messages)
  Rendezvous rdv[kRdvSlots];
};

}  // namespace ferry
