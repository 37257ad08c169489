// Ring collectives over per-channel FIFOs in peer memory, written once for
// both executors: the CUDA kernels (src/device/coll_kernels*.cu, one thread
// block per channel) and the host runtime's CPU "kernel" (src/coll/
// host_kernel.cc, one thread running the channels in turn). The schedule,
// flow control and chunk arithmetic below are therefore exercised in CI with
// real processes, and the GPU runs exactly the same steps.
//
// Connections (set up by src/coll/ring_setup.cc): in each channel every ring
// position p owns, in its own memory, a FIFO of `nslots` slots of `slotBytes`
// that p-1 writes into, and two 64-bit flags:
//   recvTail  written by p-1 (remotely) = how many slots it has filled;
//   sendHead  written by p+1 (remotely) = how many slots of p+1's FIFO it
//             has drained (so p may refill them).
// Every flag lives in the memory of the rank that polls it, so waits poll
// local memory and every remote access is a store.
// Step k of a connection uses slot k % nslots. Flow control (all counters are
// monotonic 64-bit, never reset; a communicator's kernels run one at a time
// and each keeps its channel's counters in RingChannel between launches):
//   sender, step k:   wait sendHead >= k + 1 - nslots (slot free), write the
//                     slot, publish sendTail = k + 1 (release);
//   receiver, step k: wait recvTail >= k + 1 (acquire), read the slot,
//                     publish recvHead = k + 1 (release, after the reads).
//
// Loop structure (as in NCCL's ring kernels): the buffer is walked in rounds;
// in each round every channel owns nranks chunks of at most chunkElts
// elements, and every primitive moves one chunk (<= nslots/2 slots) so that
// a full round can never wedge the FIFOs: each position sends at most half a
// FIFO before it must receive.
//
// Threading: a RingPrims object belongs to one channel executor (one block /
// one host thread). Platforms provide waits, posts and the data loop:
//
//   struct Platform {
//     struct Ctx;   // per-executor context (thread index, abort, deadline)
//     // Every thread of the executor calls; returns false (in every thread)
//     // when the communicator was aborted or the wait timed out. Acquire:
//     // data the poster wrote before its post is visible after it.
//     static bool waitGeq(Ctx&, const uint64_t* flag, uint64_t target);
//     // Every thread calls after its own data stores/loads for the step; one
//     // store of `value` to *flag, ordered after all of them (release).
//     static void post(Ctx&, uint64_t* flag, uint64_t value);
//     // One store of `value` to *word by the thread that posts next, in
//     // program order before that post (whose release then covers it).
//     static void note(Ctx&, uint64_t* word, uint64_t value);
//     // value[i] = local ? pre(local[i]) : fifo[i], combined with fifo[i]
//     // when both are given; post(value) when `final`; stored to dst0 and
//     // dst1 (either may be null). `fifo` was written by a peer: read it
//     // bypassing non-coherent caches. n may be 0.
//     template <class T, class Op>
//     static void reduceCopy(Ctx&, const Op&, const T* local, const T* fifo,
//                            T* dst0, T* dst1, uint64_t n, bool final);
//   };
#pragma once

#include <cstdint>
#include <type_traits>

#include "algo/reduce_ops.h"
#include "algo/ring_schedule.h"

namespace ferry::algo {

enum CollKind : int {
  kCollAllReduce = 0,
  kCollAllGather = 1,
  kCollReduceScatter = 2,
  kCollBroadcast = 3,
  kCollReduce = 4,
  kNumCollKinds = 5
};

// Reduction function families the kernels are instantiated for (Avg runs as
// Sum with a final division; copies (all-gather, broadcast) use kFnCopy).
// Wire protocol of one launch: the bandwidth FIFO (slots + tail flags) or
// LL (flag per 16-byte line, algo/coll_ll.h).
enum CollProto : int { kProtoSimple = 0, kProtoLL = 1 };

enum CollFn : int {
  kFnSum = 0,
  kFnProd = 1,
  kFnMax = 2,
  kFnMin = 3,
  kFnPreMulSum = 4,
  kFnCopy = 5,
  kNumCollFns = 6
};

// One channel's connection ends, as the executor sees them. Lives in the
// rank's own device memory (host runtime: shared host memory); the executor
// reads it at launch and writes back sendStep/recvStep when it ends.
struct RingChannel {
  char* recvFifo;      // own memory: slots written by the previous position
  char* sendFifo;      // the next position's recvFifo (mapped)
  uint64_t* recvTail;  // own memory; the previous position publishes fills
  uint64_t* sendTail;  // the next position's recvTail (mapped)
  uint64_t* sendHead;  // own memory; the next position publishes drains
  uint64_t* recvHead;  // the previous position's sendHead (mapped)
  // Only where the next position is on another host (a ring hop carries
  // the slots: proxy/ring_hop.h): the bytes the kernel put in each slot,
  // by step % nslots, so that the hop ships those and not the whole slot.
  // Null otherwise.
  uint64_t* sendSizes;
  uint64_t sendStep;  // slots sent on this channel so far (persistent)
  uint64_t recvStep;  // slots received so far (persistent)
  // The LL protocol's connection (algo/coll_ll.h), ring channels only: its
  // own FIFO, head flags and counters, the same roles as above (no tails:
  // LL lines carry their own flags).
  char* llRecvFifo;
  char* llSendFifo;
  uint64_t* llSendHead;
  uint64_t* llRecvHead;
  uint64_t llSendStep;
  uint64_t llRecvStep;
};
static_assert(std::is_trivially_copyable_v<RingChannel>, "lives in device memory");

// Everything one launch needs; passed by value to the kernel.
struct CollArgs {
  int32_t coll;  // CollKind
  int32_t fn;    // CollFn (for the log; the kernel is typed by it)
  int32_t nranks;
  int32_t pos;         // this rank's ring position
  int32_t rootPos;     // ring position of the root (broadcast, reduce)
  int32_t nchannels;   // channels used by this launch (<= allocated)
  uint32_t nslots;     // FIFO slots per channel (>= 2, even)
  uint16_t avg;        // ncclAvg: divide the final value by this (0: not Avg)
  uint16_t proto;      // CollProto
  uint64_t slotBytes;  // bytes per slot of this launch's protocol (FIFO: multiple
                       // of 16; LL: of 32). The struct's size is kept as small
                       // as before LL existed: the kernels sit at 128 registers
                       // and a larger argument block made ptxas spill.
  uint64_t chunkElts;  // max elements per chunk per channel (0 = derive)
  uint64_t count;      // elements (per rank for all-gather/reduce-scatter)
  const void* sendbuff;
  void* recvbuff;
  RingChannel* channels;               // nchannels entries, in the executor's memory
  const int32_t* ringRanks;            // rank at each ring position (nranks entries)
  uint64_t scalarBits;                 // PreMulSum scalar as the element's bits (host scalar)
  const void* scalarPtr;               // or, when non-null, read from here at launch
  const volatile uint32_t* abortFlag;  // non-zero: stop at the next wait
  uint64_t timeoutNs;                  // a wait longer than this fails the launch
};
static_assert(std::is_trivially_copyable_v<CollArgs>, "kernel argument");

// The operation applied by reduceCopy: pre (a rank's own input enters the
// reduction exactly once, scaled for PreMulSum), combine, post (Avg).
template <class T, int kFn>
struct CollOp {
  T scalar;
  int32_t nranks;
  bool avg;
  FERRY_HD T pre(T x) const {
    if constexpr (kFn == kFnPreMulSum) return arithMul(x, scalar);
    return x;
  }
  FERRY_HD T combine(T a, T b) const {
    if constexpr (kFn == kFnSum || kFn == kFnPreMulSum) return arithAdd(a, b);
    if constexpr (kFn == kFnProd) return arithMul(a, b);
    if constexpr (kFn == kFnMax) return Max<T>{}(a, b);
    if constexpr (kFn == kFnMin) return Min<T>{}(a, b);
    return b;  // kFnCopy never combines
  }
  FERRY_HD T post(T x) const {
    if constexpr (kFn == kFnSum) {
      if (avg) return finalizeAvg(x, nranks);
    }
    return x;
  }
};

template <class T>
FERRY_HD inline T scalarFromBits(uint64_t bits) {
  T v;
  memcpy(&v, &bits, sizeof(T));
  return v;
}

// Largest elements per slot, a multiple of the 16-byte alignment unit.
FERRY_HD inline uint64_t sliceEltsFor(uint64_t slotBytes, uint32_t eltBytes) {
  uint64_t n = slotBytes / eltBytes;
  uint64_t a = alignElts(eltBytes);
  return n / a * a;
}

// The primitives of one channel: each moves `n` elements in slot-sized steps.
// What a primitive does (RingPrims/LlPrims::run).
enum PrimBits : uint32_t { kRecv = 1, kSend = 2, kFinal = 4 };

// The primitives as runRingChannel calls them, mapped onto one
// Derived::run(in, what, out, n) (RingPrims here, LlPrims in coll_ll.h).
template <class Derived, class T>
class PrimOps {
 public:
  FERRY_HD bool send(const T* in, uint64_t n) { return self().run(in, kSend, nullptr, n); }
  FERRY_HD bool copySend(const T* in, T* out, uint64_t n) { return self().run(in, kSend, out, n); }
  FERRY_HD bool recvReduceSend(const T* in, uint64_t n) {
    return self().run(in, kRecv | kSend, nullptr, n);
  }
  FERRY_HD bool recvReduceCopySend(const T* in, T* out, uint64_t n) {
    return self().run(in, kRecv | kSend | kFinal, out, n);
  }
  FERRY_HD bool recvReduceCopy(const T* in, T* out, uint64_t n) {
    return self().run(in, kRecv | kFinal, out, n);
  }
  FERRY_HD bool recvCopySend(T* out, uint64_t n) {
    return self().run(nullptr, kRecv | kSend, out, n);
  }
  FERRY_HD bool recv(T* out, uint64_t n) { return self().run(nullptr, kRecv, out, n); }

 private:
  FERRY_HD Derived& self() { return *static_cast<Derived*>(this); }
};

template <class P, class T, class Op>
class RingPrims : public PrimOps<RingPrims<P, T, Op>, T> {
 public:
  using Elt = T;
  FERRY_HD RingPrims(typename P::Ctx& ctx, const RingChannel& ch, const Op& op, uint32_t nslots,
                     uint64_t sliceElts)
      : ctx_(ctx),
        ch_{ch.recvFifo, ch.sendFifo,  ch.recvTail, ch.sendTail, ch.sendHead,
            ch.recvHead, ch.sendSizes, ch.sendStep, ch.recvStep},
        op_(op),
        nslots_(nslots),
        sliceElts_(sliceElts) {}

  FERRY_HD uint64_t sliceElts() const { return sliceElts_; }
  // One rank, or the root's local part: out = post(pre(in)).
  FERRY_HD void localCopy(const T* in, T* out, uint64_t n, bool reduction) {
    P::template reduceCopy<T, Op>(ctx_, op_, in, nullptr, out, nullptr, n, reduction);
  }
  // The counters to store back into the channel when the launch ends
  // (kernel p2p stores one direction only).
  FERRY_HD uint64_t sendStep() const { return ch_.sendStep; }
  FERRY_HD uint64_t recvStep() const { return ch_.recvStep; }
  FERRY_HD void saveTo(RingChannel* ch) const {
    ch->sendStep = ch_.sendStep;
    ch->recvStep = ch_.recvStep;
  }

 private:
  friend class PrimOps<RingPrims, T>;
  FERRY_HD T* slot(char* fifo, uint64_t step) const {
    return reinterpret_cast<T*>(fifo + (step % nslots_) * (sliceElts_ * sizeof(T)));
  }
  // Out of line: the ring schedule calls it from many places.
  // `what`: kRecv, kSend, kFinal bits (one argument: fewer call registers).
  FERRY_HD FERRY_NOINLINE bool run(const T* in, uint32_t what, T* out, uint64_t n) {
    const bool recv = (what & kRecv) != 0;
    const bool send = (what & kSend) != 0;
    const bool final = (what & kFinal) != 0;
    // A slot smaller than one 16-byte unit (setup refuses < 1 KiB) would
    // never advance: fail instead of spinning.
    if (sliceElts_ == 0) return n == 0;
    for (uint64_t off = 0; off < n; off += sliceElts_) {
      uint64_t m = minU64(sliceElts_, n - off);
      const T* fifo = nullptr;
      T* sendSlot = nullptr;
      if (recv) {
        if (!P::waitGeq(ctx_, ch_.recvTail, ch_.recvStep + 1)) return false;
        fifo = slot(ch_.recvFifo, ch_.recvStep);
      }
      if (send) {
        // Slot k is free once the receiver drained step k - nslots.
        if (ch_.sendStep + 1 > nslots_ &&
            !P::waitGeq(ctx_, ch_.sendHead, ch_.sendStep + 1 - nslots_)) {
          return false;
        }
        sendSlot = slot(ch_.sendFifo, ch_.sendStep);
        // The slot's size (a ring hop reads it once it acquired the tail,
        // which the post below publishes after it).
        if (ch_.sendSizes != nullptr) {
          P::note(ctx_, ch_.sendSizes + ch_.sendStep % nslots_, m * sizeof(T));
        }
      }
      P::template reduceCopy<T, Op>(ctx_, op_, in != nullptr ? in + off : nullptr, fifo, sendSlot,
                                    out != nullptr ? out + off : nullptr, m, final);
      // Release: the slot's data and size (sender) resp. our reads of it
      // (receiver) are ordered before the counter the peer acquires.
      if (send) P::post(ctx_, ch_.sendTail, ++ch_.sendStep);
      if (recv) P::post(ctx_, ch_.recvHead, ++ch_.recvStep);
    }
    return true;
  }

  // The FIFO protocol's fields of the channel (registers: not the LL ones).
  struct Ends {
    char* recvFifo;
    char* sendFifo;
    uint64_t* recvTail;
    uint64_t* sendTail;
    uint64_t* sendHead;
    uint64_t* recvHead;
    uint64_t* sendSizes;
    uint64_t sendStep;
    uint64_t recvStep;
  };
  typename P::Ctx& ctx_;
  Ends ch_;
  Op op_;
  uint32_t nslots_;
  uint64_t sliceElts_;
};

// Elements of one chunk per channel per round: half the FIFO, aligned.
FERRY_HD inline uint64_t roundChunkElts(const CollArgs& a, uint64_t sliceElts) {
  uint64_t c = a.chunkElts != 0 ? a.chunkElts : sliceElts * (a.nslots / 2);
  return c < sliceElts ? sliceElts : c / sliceElts * sliceElts;
}

// Runs channel `h` of the collective with `prims` (RingPrims or LlPrims);
// false when aborted or timed out. Prims::Elt is the element type (all-
// gather/broadcast: bytes, the host converts the count). The executor stores
// the counters back from `prims` afterwards (saveTo).
template <class Prims>
FERRY_HD bool runRingChannel(Prims& prims, const CollArgs& a, int h) {
  using T = typename Prims::Elt;
  const uint64_t sliceElts = prims.sliceElts();
  if (sliceElts == 0) return a.count == 0;  // setup refuses such slots; never divide by 0
  const int n = a.nranks;
  const int p = a.pos;
  const uint64_t al = alignElts(sizeof(T));
  const uint64_t maxChunk = roundChunkElts(a, sliceElts);
  const uint64_t nch = static_cast<uint64_t>(a.nchannels);
  const T* in = static_cast<const T*>(a.sendbuff);
  T* out = static_cast<T*>(a.recvbuff);
  const bool reduction = a.coll != kCollAllGather && a.coll != kCollBroadcast;
  const bool perRankBlocks = a.coll == kCollAllGather || a.coll == kCollReduceScatter;
  // Ring collectives with blocks per rank split rounds over channels only;
  // all-reduce also over the n chunks; pipelines (broadcast, reduce) too.
  const uint64_t parts = a.coll == kCollAllReduce ? nch * static_cast<uint64_t>(n) : nch;
  for (uint64_t base = 0; base < a.count; base += parts * maxChunk) {
    const uint64_t rem = a.count - base;
    const uint64_t cs = minU64(maxChunk, roundUp(ceilDiv(rem, parts), al));
    if (a.coll == kCollAllReduce) {
      // Chunk c of channel h in this round: [start + c*cs, +cs) clipped.
      const uint64_t start = base + static_cast<uint64_t>(h) * n * cs;
      auto off = [&](int c) { return minU64(start + static_cast<uint64_t>(c) * cs, a.count); };
      auto len = [&](int c) { return minU64(cs, a.count - off(c)); };
      if (n == 1) {
        prims.localCopy(in + off(0), out + off(0), len(0), true);
        continue;
      }
      int c = ringMod(p - 1, n);
      if (!prims.send(in + off(c), len(c))) return false;
      for (int j = 2; j < n; ++j) {
        c = ringMod(p - j, n);
        if (!prims.recvReduceSend(in + off(c), len(c))) return false;
      }
      c = p;
      if (!prims.recvReduceCopySend(in + off(c), out + off(c), len(c))) return false;
      for (int j = 1; j < n - 1; ++j) {
        c = ringMod(p - j, n);
        if (!prims.recvCopySend(out + off(c), len(c))) return false;
      }
      c = ringMod(p + 1, n);
      if (!prims.recv(out + off(c), len(c))) return false;
      continue;
    }
    // This channel's piece of every block (per-rank layouts) or of the buffer.
    const uint64_t po = minU64(base + static_cast<uint64_t>(h) * cs, a.count);
    const uint64_t pn = minU64(cs, a.count - po);
    if (pn == 0) continue;
    auto block = [&](int pos) { return static_cast<uint64_t>(a.ringRanks[pos]) * a.count + po; };
    if (perRankBlocks && n == 1) {
      prims.localCopy(in + po, out + po, pn, reduction);
      continue;
    }
    if (a.coll == kCollAllGather) {
      const T* mine = in + po;
      if (!prims.copySend(mine, out + block(p) == mine ? nullptr : out + block(p), pn)) {
        return false;
      }
      for (int j = 1; j < n - 1; ++j) {
        if (!prims.recvCopySend(out + block(ringMod(p - j, n)), pn)) return false;
      }
      if (!prims.recv(out + block(ringMod(p + 1, n)), pn)) return false;
    } else if (a.coll == kCollReduceScatter) {
      if (!prims.send(in + block(ringMod(p - 1, n)), pn)) return false;
      for (int j = 2; j < n; ++j) {
        if (!prims.recvReduceSend(in + block(ringMod(p - j, n)), pn)) return false;
      }
      if (!prims.recvReduceCopy(in + block(p), out + po, pn)) return false;
    } else if (a.coll == kCollBroadcast) {
      if (n == 1) {
        if (in + po != out + po) prims.localCopy(in + po, out + po, pn, false);
      } else if (p == a.rootPos) {
        if (!prims.copySend(in + po, in + po == out + po ? nullptr : out + po, pn)) return false;
      } else if (ringMod(p + 1, n) == a.rootPos) {
        if (!prims.recv(out + po, pn)) return false;
      } else if (!prims.recvCopySend(out + po, pn)) {
        return false;
      }
    } else {  // kCollReduce
      if (n == 1) {
        prims.localCopy(in + po, out + po, pn, true);
      } else if (ringMod(p - 1, n) == a.rootPos) {
        if (!prims.send(in + po, pn)) return false;
      } else if (p == a.rootPos) {
        if (!prims.recvReduceCopy(in + po, out + po, pn)) return false;
      } else if (!prims.recvReduceSend(in + po, pn)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace ferry::algo
