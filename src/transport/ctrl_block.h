// The control block of one SM-free connection (sender S -> receiver R): a
// small region of host shared memory mapped by both processes and registered
// with both runtimes, so CPUs and GPU streams (stream memory operations,
// wait kernels) of either side can read and write its words.
//
// Protocol (version 2, "the second to arrive copies"). Everything a message
// needs on the GPU is submitted by the user's thread inside the API call
// (ncclGroupEnd), never later by a proxy thread: a CUDA module or kernel load
// may synchronize the whole context and wait for every pending stream wait
// (CUDA documents this for lazy loading; NOTES.md trap 22), so a pending
// wait that only a later submission could release deadlocks the process.
// Here every pending wait is released by work the peer submitted in its own
// call, exactly as with NCCL's kernels.
//
// The k-th send from S to R matches the k-th receive of R from S (k = 0, 1,
// ...; NCCL's order). Message k uses slot[k % kMsgSlots]; gen = k + 1.
//   claim: each side, in its call, publishes its own PostInfo (where its
//     bytes are, how to map them) and then sets its bit in `claim` with
//     generation gen (CPU atomics, acq_rel). The side that finds the other's
//     bit already set for gen is SECOND: it reads the other's PostInfo; the
//     other was FIRST. Exactly one side is first (the CAS decides).
//   first: its user stream writes ready = gen once it reaches the operation
//     (a first sender's bytes are in place; a first receiver's buffer may be
//     overwritten from now on), then waits until done >= gen (a staged send
//     does not wait: the peer reads the staging copy).
//   second: it copies on its connection stream, after its own user stream
//     reached the operation (event) and after ready >= gen (not waited for
//     on the GPU when the CPU already sees it): a second sender pushes into
//     the first receiver's buffer, a second receiver pulls from the first
//     sender's. Then that stream writes done = gen; the user stream waits
//     for the copy (event). Stream writes are ordered after the copy and
//     carry a memory barrier: the bytes are visible before the flag.
//   A buffer the peer cannot map (or an SHM connection, where peers cannot
//   reach each other's GPU memory) is replaced by a staging block of the
//   side that is first; the second side never needs staging for its own
//   buffer, since it copies to or from it itself.
//   reuse: slot j is claimed for gen only when its previous generation
//     (gen - kMsgSlots) has both bits set (the second side read the info)
//     and done >= gen - kMsgSlots (every GPU write of it has landed, so no
//     late write can move ready or done backwards). Otherwise the caller
//     waits (bounded by FERRY_P2P_TIMEOUT, honouring abort).
//   errors: either side stores a nonzero code in `error` (release); the
//     other side fails its pending operations and its next calls.
// Writers: claim (both CPUs, atomic), sendInfo (S CPU), recvInfo (R CPU),
// ready (the first side's user stream), done (the second side's copy
// stream); on failure a side writes kReleased into the words only ITS OWN
// streams wait on, never into words the peer waits on (NOTES.md trap 1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry {

constexpr uint64_t kCtrlMagic = 0x4665727279437472ULL;  // "FerryCtr"
constexpr uint32_t kCtrlVersion = 2;
constexpr int kMsgSlots = 128;
// A value >= every generation: written into a word to release its waiters.
constexpr uint64_t kReleased = uint64_t{1} << 62;

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

// How the second side reaches the first side's bytes.
enum class PostKind : uint32_t {
  None = 0,
  Local = 1,     // same process: `localPtr` is directly usable
  Ipc = 2,       // map allocation `allocId` (ipcType, ipc) and add `offset`
  Resource = 3,  // a staging block offered through the proxy RPC under `allocId`
};

// What the first side publishes about its bytes for one message.
struct alignas(64) PostInfo {
  uint64_t bytes;      // size; the two sides' sizes must be equal
  uint32_t kind;       // PostKind
  uint32_t ipcType;    // rt::IpcDescriptor::Type (Ipc)
  uint64_t allocId;    // allocation id (Ipc) or resource key (Resource)
  uint64_t allocSize;  // size of that allocation or block
  uint64_t offset;     // of the bytes inside it
  uint64_t localPtr;   // the bytes in the first side's process (Local)
  uint32_t staged;     // 1: the bytes are in a staging block (counters)
  uint32_t reserved;
  uint8_t ipc[64];  // the allocation's IPC handle bytes (Ipc, CUDA)
};
static_assert(sizeof(PostInfo) == 128);

constexpr uint64_t kClaimSender = 1;
constexpr uint64_t kClaimReceiver = 2;

struct MsgSlot {
  CtrlWord claim;  // (gen << 2) | kClaimSender | kClaimReceiver
  CtrlWord ready;  // gen: the first side's user stream reached the operation
  CtrlWord done;   // gen: the second side's copy has landed
  PostInfo sendInfo;
  PostInfo recvInfo;
};

struct CtrlBlock {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  CtrlWord error;  // either side (CPU); first nonzero wins
  MsgSlot slot[kMsgSlots];
};

}  // namespace ferry
