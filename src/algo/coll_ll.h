// The low-latency (LL) protocol of the ring collectives: the same schedule
// as algo/coll_ring.h (runRingChannel drives either primitive class), but
// every FIFO line carries its own step flag next to its data, so a receiver
// needs no separate tail counter and a sender no fence: one store per line
// publishes data and readiness at once. Costs half the FIFO bandwidth (8
// payload bytes per 16-byte line), so it serves small collectives only; the
// engine picks the protocol by size (FERRY_COLL_LL_MAX_BYTES).
//
// Line format (LlLine): two 8-byte words, word[i] = payload32[i] | flag << 32.
// Each word is written by one 8-byte store and read by one 8-byte load
// (single-copy atomic), so a reader that sees the awaited flag in both words
// holds the whole 8-byte payload. The flag of step k is uint32(k + 1).
// A stale line can only show the flag of an earlier use of its slot; that
// equals the awaited flag only when the line went unwritten for exactly a
// multiple of 2^32 steps of its channel (accepted, as in NCCL's LL).
//
// Flow control: the LL connection of a channel has its own step counters
// (RingChannel::ll*) and FIFO of nslots slots; the receiver publishes
// llRecvHead = k + 1 after every thread's reads of step k (a relaxed store:
// the reads have returned their values, each checked for its flag, before
// the barrier that precedes the store), and before overwriting slot
// k % nslots every executor thread that writes lines of step k waits for
// llSendHead >= k + 1 - nslots itself (no barrier). Its line stores depend
// on the value it read (no store is performed speculatively), so they cannot
// reach the receiver before the reads that head acknowledges.
//
// Across hosts (coll/ring_net.h): where the next rank is on another host,
// the channel's sendSizes is set and its LL FIFO is a mirror in host memory
// that a proxy ring hop ships from. Line flags alone cannot tell the proxy
// when a step is complete (it does not know how many lines a step has), so
// after each sending step the executor notes the step's line bytes in
// sendSizes and posts sendTail = k + 1 as the FIFO protocol does (release,
// after the step's barrier: every line store precedes it). The receiving
// hop lands the lines in the next rank's LL FIFO with 8-byte stores, so
// the flags there stay the readiness; no tail is posted on that side.
//
// Platform additions to the concept of coll_ring.h:
//   // Every thread of the executor calls; its threads split the step's
//   // lines (usually through llLines below). True in every thread when all
//   // lines were read; false in every thread on abort or timeout.
//   template <class T, class Op>
//   static bool llStep(Ctx&, const Op&, const T* local, const LlLine* recv,
//                      uint32_t recvFlag, const LlSendTo& send, T* dst,
//                      uint64_t n, bool final);
//   // After llStep: publishes the receive head (see Flow control).
//   static void postHead(Ctx&, uint64_t* flag, uint64_t value);
#pragma once

#include <cstdint>
#include <cstring>

#include "algo/coll_ring.h"

namespace ferry::algo {

struct LlLine {
  uint64_t word[2];
};
static_assert(sizeof(LlLine) == 16, "one 16-byte line");

constexpr uint64_t kLlLineBytes = sizeof(LlLine);
constexpr uint64_t kLlPayloadBytes = 8;  // per line

FERRY_HD inline uint32_t llFlag(uint64_t step) {
  return static_cast<uint32_t>(step + 1);
}

// The line format, shared by every executor's line accesses.
FERRY_HD inline uint64_t llWord0(uint64_t data, uint32_t flag) {
  return (data & 0xffffffffULL) | (static_cast<uint64_t>(flag) << 32);
}
FERRY_HD inline uint64_t llWord1(uint64_t data, uint32_t flag) {
  return (data >> 32) | (static_cast<uint64_t>(flag) << 32);
}
// Whether words w0, w1 (read with one 8-byte access each) hold step `flag`:
// both must, as each was stored on its own.
FERRY_HD inline bool llReady(uint64_t w0, uint64_t w1, uint32_t flag) {
  return (w0 >> 32) == flag && (w1 >> 32) == flag;
}
FERRY_HD inline uint64_t llData(uint64_t w0, uint64_t w1) {
  return (w0 & 0xffffffffULL) | (w1 << 32);
}

// Elements per LL slot: half its bytes are payload; a multiple of the
// 16-byte alignment unit, so that steps end on whole words.
FERRY_HD inline uint64_t llSliceElts(uint64_t llSlotBytes, uint32_t eltBytes) {
  return sliceEltsFor(llSlotBytes / kLlLineBytes * kLlPayloadBytes, eltBytes);
}

// 8 bytes of user memory as one word (p is 8-byte aligned).
FERRY_HD inline uint64_t llLoadAligned(const void* p) {
#ifdef __CUDA_ARCH__
  return *static_cast<const uint64_t*>(p);
#else
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
#endif
}
FERRY_HD inline void llStoreAligned(void* p, uint64_t v) {
#ifdef __CUDA_ARCH__
  *static_cast<uint64_t*>(p) = v;
#else
  memcpy(p, &v, sizeof(v));
#endif
}

// The first `valid` elements at p as a word (the rest zero).
template <class T>
FERRY_HD inline uint64_t llLoadElts(const T* p, uint32_t valid) {
  constexpr uint32_t kPer = kLlPayloadBytes / sizeof(T);
  if (valid == kPer && reinterpret_cast<uintptr_t>(p) % kLlPayloadBytes == 0) {
    return llLoadAligned(p);
  }
  uint64_t w = 0;
  memcpy(&w, p, valid * sizeof(T));
  return w;
}

template <class T>
FERRY_HD inline void llStoreElts(T* p, uint64_t w, uint32_t valid) {
  constexpr uint32_t kPer = kLlPayloadBytes / sizeof(T);
  if (valid == kPer && reinterpret_cast<uintptr_t>(p) % kLlPayloadBytes == 0) {
    llStoreAligned(p, w);
    return;
  }
  memcpy(p, &w, valid * sizeof(T));
}

// pre(local) combined with fifo (either may be absent), post when `final`,
// element by element over one word.
template <class T, class Op>
FERRY_HD inline uint64_t llApply(const Op& op, bool hasLocal, uint64_t l, bool hasFifo, uint64_t f,
                                 bool final) {
  constexpr int kPer = kLlPayloadBytes / sizeof(T);
  T a[kPer];
  T b[kPer];
  memcpy(a, &l, sizeof(a));
  memcpy(b, &f, sizeof(b));
  for (int j = 0; j < kPer; ++j) {  // constant trip count: unrolled by the compiler
    T v = hasLocal ? op.pre(a[j]) : b[j];
    if (hasLocal && hasFifo) v = op.combine(v, b[j]);
    if (final) v = op.post(v);
    a[j] = v;
  }
  uint64_t r;
  memcpy(&r, a, sizeof(r));
  return r;
}

// What a line read needs to give up: the communicator's abort word and the
// wait limit (plus where we are, for the message).
struct LlWait {
  const volatile uint32_t* abortFlag;
  uint64_t timeoutNs;  // 0: no limit
  int32_t pos;
  int32_t channel;
};
enum LlResult : int { kLlOk = 0, kLlAborted = 1, kLlTimedOut = 2 };

// The send side of one step: where the lines go, their flag, and the head
// each writing thread must see first (head == nullptr: the slot is known
// free, i.e. within the first nslots steps).
struct LlSendTo {
  LlLine* lines;  // nullptr: this step sends nothing
  const uint64_t* head;
  uint64_t headMin;
  uint32_t flag;
};

// One executor thread's share of a step: lines first, first + stride, ...
// Io provides the line accesses:
//   static int read(const LlWait&, const LlLine*, uint32_t flag, uint64_t* data);
//     spins until both words carry `flag`; an LlResult.
//   static void write(LlLine*, uint64_t data, uint32_t flag);
//   static int waitHead(const LlWait&, const uint64_t* head, uint64_t min);
//     spins until *head >= min; an LlResult.
// Returns kLlOk, or the result of the wait that failed (the rest skipped).
template <class Io, class T, class Op>
FERRY_HD int llLines(const LlWait& wait, const Op& op, const T* local, const LlLine* recv,
                     uint32_t recvFlag, const LlSendTo& send, T* dst, uint64_t n, bool final,
                     uint64_t first, uint64_t stride) {
  static_assert(sizeof(T) <= kLlPayloadBytes, "an element fits one line");
  constexpr uint64_t kPer = kLlPayloadBytes / sizeof(T);
  const uint64_t nwords = ceilDiv(n, kPer);
  if (send.lines != nullptr && send.head != nullptr && first < nwords) {
    const int r = Io::waitHead(wait, send.head, send.headMin);
    if (r != kLlOk) return r;
  }
  for (uint64_t w = first; w < nwords; w += stride) {
    const uint32_t valid = static_cast<uint32_t>(minU64(kPer, n - w * kPer));
    uint64_t f = 0;
    if (recv != nullptr) {
      const int r = Io::read(wait, recv + w, recvFlag, &f);
      if (r != kLlOk) return r;
    }
    const uint64_t l = local != nullptr ? llLoadElts(local + w * kPer, valid) : 0;
    const uint64_t v = llApply<T, Op>(op, local != nullptr, l, recv != nullptr, f, final);
    if (send.lines != nullptr) Io::write(send.lines + w, v, send.flag);
    if (dst != nullptr) llStoreElts(dst + w * kPer, v, valid);
  }
  return kLlOk;
}

// The LL primitives of one channel; the same interface as RingPrims.
template <class P, class T, class Op>
class LlPrims : public PrimOps<LlPrims<P, T, Op>, T> {
 public:
  using Elt = T;
  FERRY_HD LlPrims(typename P::Ctx& ctx, const RingChannel& ch, const Op& op, uint32_t nslots,
                   uint64_t llSlotBytes)
      : ctx_(ctx),
        ch_{ch.llRecvFifo, ch.llSendFifo, ch.llSendHead, ch.llRecvHead,
            ch.sendSizes,  ch.sendTail,   ch.llSendStep, ch.llRecvStep},
        op_(op),
        nslots_(nslots),
        slotLines_(llSlotBytes / kLlLineBytes),
        sliceElts_(llSliceElts(llSlotBytes, sizeof(T))) {}

  FERRY_HD uint64_t sliceElts() const { return sliceElts_; }
  FERRY_HD void localCopy(const T* in, T* out, uint64_t n, bool reduction) {
    P::template reduceCopy<T, Op>(ctx_, op_, in, nullptr, out, nullptr, n, reduction);
  }
  // Stores this connection's counters back (the executor's channel table).
  FERRY_HD void saveTo(RingChannel* ch) const {
    ch->llSendStep = ch_.llSendStep;
    ch->llRecvStep = ch_.llRecvStep;
  }
  FERRY_HD uint64_t sendStep() const { return ch_.llSendStep; }
  FERRY_HD uint64_t recvStep() const { return ch_.llRecvStep; }

 private:
  friend class PrimOps<LlPrims, T>;
  FERRY_HD LlLine* slot(char* fifo, uint64_t step) const {
    return reinterpret_cast<LlLine*>(fifo) + (step % nslots_) * slotLines_;
  }
  // Out of line: the ring schedule calls it from many places.
  FERRY_HD FERRY_NOINLINE bool run(const T* in, uint32_t what, T* out, uint64_t n) {
    const bool recv = (what & kRecv) != 0;
    const bool send = (what & kSend) != 0;
    const bool final = (what & kFinal) != 0;
    if (sliceElts_ == 0) return n == 0;  // setup refuses such slots; never spin
    for (uint64_t off = 0; off < n; off += sliceElts_) {
      const uint64_t m = minU64(sliceElts_, n - off);
      // Slot k is free once the receiver drained step k - nslots: the
      // writing threads check that themselves (see Flow control).
      LlSendTo to{nullptr, nullptr, 0, llFlag(ch_.llSendStep)};
      if (send) {
        to.lines = slot(ch_.llSendFifo, ch_.llSendStep);
        if (ch_.llSendStep + 1 > nslots_) {
          to.head = ch_.llSendHead;
          to.headMin = ch_.llSendStep + 1 - nslots_;
        }
      }
      const LlLine* r = recv ? slot(ch_.llRecvFifo, ch_.llRecvStep) : nullptr;
      if (!P::template llStep<T, Op>(ctx_, op_, in != nullptr ? in + off : nullptr, r,
                                     llFlag(ch_.llRecvStep), to,
                                     out != nullptr ? out + off : nullptr, m, final)) {
        return false;
      }
      if (send) {
        if (ch_.sendSizes != nullptr) {  // a ring hop ships the step (see the header)
          constexpr uint64_t kPer = kLlPayloadBytes / sizeof(T);
          P::note(ctx_, ch_.sendSizes + ch_.llSendStep % nslots_, ceilDiv(m, kPer) * kLlLineBytes);
          P::post(ctx_, ch_.sendTail, ch_.llSendStep + 1);
        }
        ++ch_.llSendStep;
      }
      if (recv) P::postHead(ctx_, ch_.llRecvHead, ++ch_.llRecvStep);
    }
    return true;
  }

  // The LL fields of the channel (registers: not the FIFO protocol's), and
  // the FIFO protocol's sizes and tail where a ring hop carries the sends.
  struct Ends {
    char* llRecvFifo;
    char* llSendFifo;
    uint64_t* llSendHead;
    uint64_t* llRecvHead;
    uint64_t* sendSizes;  // null unless the next rank is on another host
    uint64_t* sendTail;
    uint64_t llSendStep;
    uint64_t llRecvStep;
  };
  typename P::Ctx& ctx_;
  Ends ch_;
  Op op_;
  uint32_t nslots_;
  uint64_t slotLines_;
  uint64_t sliceElts_;
};

}  // namespace ferry::algo
