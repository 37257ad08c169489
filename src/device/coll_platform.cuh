// The GPU executor of the ring collectives (algo/coll_ring.h): DevicePlatform
// implements coll_ring.h's Platform concept for one thread block per channel.
// For .cu files only (src/device/coll_kernels*.cu).
//
// Threading: every thread of the block calls every function with the same
// arguments (block-uniform control flow: each contains a barrier).
//
// Memory ordering (PTX memory model, sm_70+). A FIFO slot and its flag are
// written by one GPU and read by another (or through host shared memory), so
// every flag access is at system scope:
//  - waitGeq: thread 0 reads the flag with ld.acquire.sys; the block barrier
//    that follows extends that acquire to every thread (barriers order memory
//    among the threads of a CTA, and causality order is transitive). The
//    slot's data is then read with ld.global.cv, which bypasses L1: an SM may
//    still hold the slot's previous contents in L1 from nslots steps ago, and
//    in host memory (SHM transport) L2 may hold a stale line too.
//  - post: every thread's stores into the peer's slot / the user's buffer and
//    its loads from our slot come before one block barrier; thread 0 then
//    writes the flag with st.release.sys. A release is cumulative: it orders
//    before the flag everything that precedes it in causality order, so the
//    other threads' accesses (ordered before thread 0's store by the barrier)
//    are included. The peer's matching ld.acquire.sys of that flag therefore
//    sees the slot's data (sendTail) resp. knows that our reads of the slot
//    are done and it may overwrite it (recvHead).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "algo/coll_ll.h"
#include "algo/coll_ring.h"

namespace ferry::device {
namespace coll {

// Vectors (16-byte packs) in flight per thread and source in the copy and
// reduce loops: 512 threads x 4 x 16 B = 32 KiB outstanding per source and
// SM, about what it takes to cover HBM/NVLink latency at a channel's share of
// the bandwidth.
constexpr int kCopyUnroll = 4;
// Arithmetic loops: 4 as well, except where ptxas would otherwise spill
// within 128 registers (byte integers unpack 16 elements a pack; the final
// step of an Avg calls a division subroutine per element).
template <class T>
constexpr int kReduceUnroll = sizeof(T) == 1 && !algo::Arith<T>::kIsFloat ? 2 : 4;
template <class T>
constexpr int kPostUnroll = sizeof(T) == 1 && !algo::Arith<T>::kIsFloat ? 1 : 2;
// The vector loops index in 32 bits (fewer registers); longer ranges are cut.
constexpr uint64_t kMaxLoopVecs = 1ull << 30;
// Returned by commonHead when no vector path applies.
constexpr uint64_t kNoVectors = ~0ull;
// Polls between two looks at the abort flag (host memory) and the clock.
constexpr uint32_t kPollCheckMask = 2047;

enum WaitResult : int { kWaitOk = 0, kWaitAborted = 1, kWaitTimedOut = 2 };

__device__ __forceinline__ uint64_t loadAcquireSys(const uint64_t* p) {
  uint64_t v;
  // Generic address: the flag is device memory, or mapped host memory (SHM).
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// For spinning: no ordering, so no per-poll L1 invalidation; the loop ends
// with one acquire load.
__device__ __forceinline__ uint64_t loadRelaxedSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void storeReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// In a spin, every kPollCheckMask + 1 polls: the abort word, then the clock
// (*start: the time of the first look). kWaitOk: keep spinning.
__device__ __forceinline__ int checkWait(const volatile uint32_t* abortFlag, uint64_t timeoutNs,
                                         uint32_t polls, uint64_t* start) {
  if ((polls & kPollCheckMask) != 0) return kWaitOk;
  if (abortFlag != nullptr && *abortFlag != 0) return kWaitAborted;
  if (timeoutNs == 0) return kWaitOk;
  const uint64_t now = globalTimerNs();
  if (*start == 0) {
    *start = now;
  } else if (now - *start > timeoutNs) {
    return kWaitTimedOut;
  }
  return kWaitOk;
}

// Cold path of waitGeq (thread 0): spins on the flag, every kPollCheckMask+1
// polls looks at the abort flag and the clock. Not inlined: one copy per
// kernel instead of one per wait site. (printf's 40-byte argument buffer is
// the kernels' only stack use, touched only on a timeout.)
inline __device__ __noinline__ int pollGeq(const uint64_t* flag, uint64_t target,
                                           const volatile uint32_t* abortFlag, uint64_t timeoutNs,
                                           int pos, int channel) {
  uint64_t start = 0;
  for (uint32_t polls = 1;; ++polls) {
    uint64_t v = loadRelaxedSys(flag);
    if (v >= target) {
      // The counter only grows: this reads >= target too, and makes the
      // acquire that pairs with the poster's release.
      (void)loadAcquireSys(flag);
      return kWaitOk;
    }
    const int r = checkWait(abortFlag, timeoutNs, polls, &start);
    if (r == kWaitTimedOut) {
      printf(
          "ferry: collective kernel timed out: ring position %d channel %d waited %llu ms "
          "for flag %p = %llu to reach %llu (peer stalled or dead; FERRY_COLL_TIMEOUT)\n",
          pos, channel, static_cast<unsigned long long>((globalTimerNs() - start) / 1000000ull),
          static_cast<const void*>(flag), static_cast<unsigned long long>(v),
          static_cast<unsigned long long>(target));
    }
    if (r != kWaitOk) return r;
  }
}

// ---- LL lines (algo/coll_ll.h) --------------------------------------------
// A line is read and written as two 8-byte words in one vector access. The
// memory model makes each 8-byte element of a vector access single-copy
// atomic (and no more), which is all the protocol needs: data and flag share
// a word. Relaxed at system scope: strong, so no stale L1 copy is returned,
// and no fence (the flag travels with the data).
__device__ __forceinline__ void loadLine(const algo::LlLine* p, uint64_t* a, uint64_t* b) {
  asm volatile("ld.relaxed.sys.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}
__device__ __forceinline__ void storeLine(algo::LlLine* p, uint64_t a, uint64_t b) {
  asm volatile("st.relaxed.sys.v2.u64 [%0], {%1, %2};" : : "l"(p), "l"(a), "l"(b) : "memory");
}

// Line accesses for algo::llLines (coll_ll.h's LlResult equals WaitResult).
struct LineIo {
  // Spins until both words of *line carry `flag`. Not inlined: the spin
  // (abort and clock checks) is the cold path of every read.
  static __device__ __noinline__ int pollLine(const algo::LlWait& w, const algo::LlLine* line,
                                              uint32_t flag, uint64_t* data) {
    uint64_t start = 0;
    for (uint32_t polls = 1;; ++polls) {
      uint64_t a;
      uint64_t b;
      loadLine(line, &a, &b);
      if (algo::llReady(a, b, flag)) {
        *data = algo::llData(a, b);
        return kWaitOk;
      }
      const int r = checkWait(w.abortFlag, w.timeoutNs, polls, &start);
      if (r != kWaitOk) return r;
    }
  }
  static __device__ __forceinline__ int read(const algo::LlWait& w, const algo::LlLine* line,
                                             uint32_t flag, uint64_t* data) {
    uint64_t a;
    uint64_t b;
    loadLine(line, &a, &b);
    if (algo::llReady(a, b, flag)) {
      *data = algo::llData(a, b);
      return kWaitOk;
    }
    return pollLine(w, line, flag, data);
  }
  // Each writing thread polls the (local) head itself: no barrier. Relaxed:
  // see coll_ll.h's Flow control for why the line stores stay behind it.
  static __device__ __forceinline__ int waitHead(const algo::LlWait& w, const uint64_t* head,
                                                 uint64_t min) {
    return loadRelaxedSys(head) >= min ? kWaitOk : pollHead(w, head, min);
  }
  static __device__ __noinline__ int pollHead(const algo::LlWait& w, const uint64_t* head,
                                              uint64_t min) {
    uint64_t start = 0;
    for (uint32_t polls = 1;; ++polls) {
      if (loadRelaxedSys(head) >= min) return kWaitOk;
      const int r = checkWait(w.abortFlag, w.timeoutNs, polls, &start);
      if (r != kWaitOk) return r;
    }
  }
  static __device__ __forceinline__ void write(algo::LlLine* line, uint64_t data, uint32_t flag) {
    storeLine(line, algo::llWord0(data, flag), algo::llWord1(data, flag));
  }
};
static_assert(static_cast<int>(algo::kLlTimedOut) == kWaitTimedOut &&
              static_cast<int>(algo::kLlAborted) == kWaitAborted);

// This thread's lines of an LL step. Not inlined: one copy per (T, Op)
// instead of one per primitive call site (registers and build time).
template <class T, class Op>
__device__ __noinline__ int llLines(algo::LlWait wait, Op op, const T* local,
                                    const algo::LlLine* recv, uint32_t recvFlag,
                                    algo::LlSendTo send, T* dst, uint64_t n, bool final) {
  return algo::llLines<LineIo, T, Op>(wait, op, local, recv, recvFlag, send, dst, n, final,
                                      threadIdx.x, blockDim.x);
}

// ---- element and vector access ----------------------------------------------

template <int kBytes>
struct BitsOf;
template <>
struct BitsOf<1> {
  using Type = unsigned char;
};
template <>
struct BitsOf<2> {
  using Type = unsigned short;
};
template <>
struct BitsOf<4> {
  using Type = unsigned int;
};
template <>
struct BitsOf<8> {
  using Type = unsigned long long;
};

// One element of a FIFO slot, bypassing L1 (see the header comment).
template <class T>
__device__ __forceinline__ T loadFifoElt(const T* p) {
  using B = typename BitsOf<sizeof(T)>::Type;
  B b = __ldcv(reinterpret_cast<const B*>(p));
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}

// V: uint4 (16-byte packs), or uint2 / unsigned for byte copies whose
// pointers agree only modulo 8 / 4.
template <bool kFromFifo, class V>
__device__ __forceinline__ V loadVec(const V* p) {
  if constexpr (kFromFifo) {
    return __ldcv(p);  // written by a peer: bypass L1
  } else {
    return *p;  // user memory: the launch made L1 coherent with earlier work
  }
}

// dst0 is usually a peer's FIFO (NVLink), dst1 our output; plain stores
// (L1 is write-through, the post's release orders them).
template <class V>
__device__ __forceinline__ void storeVec(V* d0, V* d1, uint32_t i, V v) {
  if (d0 != nullptr) d0[i] = v;
  if (d1 != nullptr) d1[i] = v;
}

// What CollOp (coll_ring.h) does beyond a copy, so that loops skip work that
// is the identity: pre scales only for PreMulSum, post divides only for an
// Avg (Sum with avg set). Any other Op type gets both applied. Keep in step
// with CollOp.
template <class Op>
struct OpTraits {
  static constexpr bool kPreIsIdentity = false;
  static constexpr bool kIsCopy = false;
  static constexpr bool kMayPost = true;
  __device__ static bool postNeeded(const Op&, bool final) { return final; }
};
template <class T, int kFn>
struct OpTraits<algo::CollOp<T, kFn>> {
  static constexpr bool kPreIsIdentity = kFn != algo::kFnPreMulSum;
  static constexpr bool kIsCopy = kFn == algo::kFnCopy;
  static constexpr bool kMayPost = kFn == algo::kFnSum;
  __device__ static bool postNeeded(const algo::CollOp<T, kFn>& op, bool final) {
    return kFn == algo::kFnSum && final && op.avg;
  }
};

// One element: pre(local) combined with fifo (or fifo alone), then post.
template <class T, class Op, bool kLocal, bool kFifo>
__device__ __forceinline__ T applyElt(const Op& op, T l, T f, bool post) {
  T v;
  if constexpr (kLocal) {
    v = op.pre(l);
    if constexpr (kFifo) v = op.combine(v, f);
  } else {
    v = f;
  }
  if (post) v = op.post(v);
  return v;
}

// A pack is worked on in words of max(4, sizeof(T)) bytes, so that narrow
// elements are unpacked (and registers used) one word at a time.
template <class T, class Op, bool kLocal, bool kFifo, class W>
__device__ __forceinline__ W applyWord(const Op& op, W l, W f, bool post) {
  constexpr int kElts = sizeof(W) / sizeof(T);
  T a[kElts];
  T b[kElts];
  memcpy(a, &l, sizeof(W));
  memcpy(b, &f, sizeof(W));
#pragma unroll
  for (int j = 0; j < kElts; ++j) a[j] = applyElt<T, Op, kLocal, kFifo>(op, a[j], b[j], post);
  W r;
  memcpy(&r, a, sizeof(W));
  return r;
}

template <class T, class Op, bool kLocal, bool kFifo>
__device__ __forceinline__ uint4 applyPack(const Op& op, uint4 l, uint4 f, bool post) {
  using W = typename BitsOf<(sizeof(T) > 4 ? sizeof(T) : 4)>::Type;
  constexpr int kWords = 16 / sizeof(W);
  W lw[kWords];
  W fw[kWords];
  memcpy(lw, &l, 16);
  memcpy(fw, &f, 16);
#pragma unroll
  for (int w = 0; w < kWords; ++w) lw[w] = applyWord<T, Op, kLocal, kFifo>(op, lw[w], fw[w], post);
  uint4 r;
  memcpy(&r, lw, 16);
  return r;
}

// ---- vector loops over [0, n) vectors: thread t takes t, t + nt, ... --------
// A round loads all its vectors before using any (memory-level parallelism);
// what is left after the full rounds goes one vector at a time. Indices are
// 32-bit: n < kMaxLoopVecs.

template <bool kFromFifo, class V>
__device__ __forceinline__ void copyVecs(const V* src, V* d0, V* d1, uint32_t n) {
  const uint32_t nt = blockDim.x;
  uint32_t i = threadIdx.x;
  for (; i + (kCopyUnroll - 1) * nt < n; i += kCopyUnroll * nt) {
    V v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) v[u] = loadVec<kFromFifo>(src + i + u * nt);
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) storeVec(d0, d1, i + u * nt, v[u]);
  }
#pragma unroll 1
  for (; i < n; i += nt) storeVec(d0, d1, i, loadVec<kFromFifo>(src + i));
}

template <class T, class Op, bool kLocal, bool kFifo, bool kPost, int kU>
__device__ __forceinline__ void reducePacks(const Op& op, const uint4* local, const uint4* fifo,
                                            uint4* d0, uint4* d1, uint32_t n) {
  const uint32_t nt = blockDim.x;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint32_t i = threadIdx.x;
  for (; i + (kU - 1) * nt < n; i += kU * nt) {
    uint4 l[kU];
    uint4 f[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      l[u] = kLocal ? loadVec<false>(local + i + u * nt) : zero;
      f[u] = kFifo ? loadVec<true>(fifo + i + u * nt) : zero;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      storeVec(d0, d1, i + u * nt, applyPack<T, Op, kLocal, kFifo>(op, l[u], f[u], kPost));
    }
  }
  if constexpr (kU > 1) {
#pragma unroll 1
    for (; i < n; i += nt) {
      uint4 l = kLocal ? loadVec<false>(local + i) : zero;
      uint4 f = kFifo ? loadVec<true>(fifo + i) : zero;
      storeVec(d0, d1, i, applyPack<T, Op, kLocal, kFifo>(op, l, f, kPost));
    }
  }
}

// `post`: the final step of an Avg. Its division (a slow-path subroutine for
// double and 64-bit integers) gets a shorter unroll so that it cannot spill.
template <class T, class Op, bool kLocal, bool kFifo>
__device__ __forceinline__ void reducePacks(const Op& op, const uint4* local, const uint4* fifo,
                                            uint4* d0, uint4* d1, uint32_t n, bool post) {
  if (post) {
    if constexpr (OpTraits<Op>::kMayPost) {
      reducePacks<T, Op, kLocal, kFifo, true, kPostUnroll<T>>(op, local, fifo, d0, d1, n);
    }
  } else {
    reducePacks<T, Op, kLocal, kFifo, false, kReduceUnroll<T>>(op, local, fifo, d0, d1, n);
  }
}

// Element by element over [begin, end): heads, tails, misaligned buffers.
template <class T, class Op>
__device__ __forceinline__ void reduceElts(const Op& op, const T* local, const T* fifo, T* d0,
                                           T* d1, uint64_t begin, uint64_t end, bool post) {
#pragma unroll 1
  for (uint64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T v;
    if (local != nullptr && fifo != nullptr) {
      v = applyElt<T, Op, true, true>(op, local[i], loadFifoElt(fifo + i), post);
    } else if (local != nullptr) {
      v = applyElt<T, Op, true, false>(op, local[i], local[i], post);
    } else {
      T f = loadFifoElt(fifo + i);
      v = applyElt<T, Op, false, true>(op, f, f, post);
    }
    if (d0 != nullptr) d0[i] = v;
    if (d1 != nullptr) d1[i] = v;
  }
}

template <class V, class T>
__device__ __forceinline__ const V* vecsAt(const T* p, uint64_t elt) {
  return p == nullptr ? nullptr : reinterpret_cast<const V*>(p + elt);
}
template <class V, class T>
__device__ __forceinline__ V* vecsAt(T* p, uint64_t elt) {
  return p == nullptr ? nullptr : reinterpret_cast<V*>(p + elt);
}

// Elements before the first kAlign-byte boundary when every non-null pointer
// has the same offset modulo kAlign (a whole number of elements), else
// kNoVectors.
template <uint64_t kAlign, class T>
__device__ __forceinline__ uint64_t commonHead(const T* a, const T* b, const T* c, const T* d) {
  const T* ptrs[4] = {a, b, c, d};
  uint64_t mis = kNoVectors;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (ptrs[k] == nullptr) continue;
    uint64_t m = reinterpret_cast<uintptr_t>(ptrs[k]) % kAlign;
    if (mis == kNoVectors) mis = m;
    if (m != mis) return kNoVectors;
  }
  if (mis == kNoVectors || mis % sizeof(T) != 0) return kNoVectors;
  return ((kAlign - mis) % kAlign) / sizeof(T);
}

// `n` (< kMaxLoopVecs) vectors of V from element `at`. V = uint4: every op;
// narrower V: byte copies only (one source).
template <class V, class T, class Op>
__device__ __forceinline__ void reduceCopyVecs(const Op& op, const T* local, const T* fifo, T* d0,
                                               T* d1, uint64_t at, uint32_t n, bool post) {
  using Tr = OpTraits<Op>;
  const V* l = vecsAt<V>(local, at);
  const V* f = vecsAt<V>(fifo, at);
  V* o0 = vecsAt<V>(d0, at);
  V* o1 = vecsAt<V>(d1, at);
  if constexpr (sizeof(V) != 16) {
    if (local != nullptr) {
      copyVecs<false>(l, o0, o1, n);
    } else {
      copyVecs<true>(f, o0, o1, n);
    }
  } else if (local != nullptr && fifo != nullptr) {
    reducePacks<T, Op, true, true>(op, l, f, o0, o1, n, post);
  } else if (local != nullptr) {
    if (Tr::kIsCopy || (Tr::kPreIsIdentity && !post)) {
      copyVecs<false>(l, o0, o1, n);
    } else {
      reducePacks<T, Op, true, false>(op, l, nullptr, o0, o1, n, post);
    }
  } else if (!post) {
    copyVecs<true>(f, o0, o1, n);
  } else {
    // A received value that needs post() never occurs in coll_ring.h's
    // schedules (the final combine always has a local input): keep it
    // correct, but do not generate a vector loop for it.
    reduceElts<T, Op>(op, nullptr, fifo, d0, d1, at, at + uint64_t{n} * (16 / sizeof(T)), post);
  }
}

// [0, n) as elements [0, head), vectors of V, elements for the tail.
template <class V, class T, class Op>
__device__ __forceinline__ void reduceCopyRange(const Op& op, const T* local, const T* fifo, T* d0,
                                                T* d1, uint64_t n, uint64_t head, bool post) {
  constexpr uint64_t kPer = sizeof(V) / sizeof(T);
  const uint64_t nvecs = (n - head) / kPer;
  const uint64_t tail = head + nvecs * kPer;
  if (head != 0) reduceElts<T, Op>(op, local, fifo, d0, d1, 0, head, post);
  for (uint64_t done = 0; done < nvecs; done += kMaxLoopVecs) {
    const uint64_t m = nvecs - done < kMaxLoopVecs ? nvecs - done : kMaxLoopVecs;
    reduceCopyVecs<V, T, Op>(op, local, fifo, d0, d1, head + done * kPer, static_cast<uint32_t>(m),
                             post);
  }
  if (tail != n) reduceElts<T, Op>(op, local, fifo, d0, d1, tail, n, post);
}

// coll_ring.h's reduceCopy. Not inlined: one copy per (T, Op) instead of one
// per primitive call site (build time); the op travels by value so that it
// stays in registers.
template <class T, class Op>
__device__ __noinline__ void reduceCopy(Op op, const T* local, const T* fifo, T* d0, T* d1,
                                        uint64_t n, bool final) {
  if (n == 0 || (local == nullptr && fifo == nullptr)) return;
  const bool post = OpTraits<Op>::postNeeded(op, final);
  const uint64_t head = commonHead<16>(local, fifo, static_cast<const T*>(d0), d1);
  if (head != kNoVectors && head < n) {
    reduceCopyRange<uint4, T, Op>(op, local, fifo, d0, d1, n, head, post);
    return;
  }
  if constexpr (OpTraits<Op>::kIsCopy && sizeof(T) == 1) {
    // Byte copies whose pointers disagree modulo 16, e.g. the all-gather
    // blocks of a count that is not a multiple of 16 bytes: the widest words
    // they agree on.
    if (local == nullptr || fifo == nullptr) {
      const uint64_t head8 = commonHead<8>(local, fifo, static_cast<const T*>(d0), d1);
      if (head8 != kNoVectors && head8 < n) {
        reduceCopyRange<uint2, T, Op>(op, local, fifo, d0, d1, n, head8, post);
        return;
      }
      const uint64_t head4 = commonHead<4>(local, fifo, static_cast<const T*>(d0), d1);
      if (head4 != kNoVectors && head4 < n) {
        reduceCopyRange<unsigned, T, Op>(op, local, fifo, d0, d1, n, head4, post);
        return;
      }
    }
  }
  reduceElts<T, Op>(op, local, fifo, d0, d1, 0, n, post);
}

}  // namespace coll

struct DevicePlatform {
  // Per-thread copy (every thread builds the same one).
  struct Ctx {
    const volatile uint32_t* abortFlag;  // host-mapped; may be null
    uint64_t timeoutNs;                  // per wait; 0 = no limit
    int32_t pos;                         // ring position (for the timeout line)
    int32_t channel;
    int32_t failure;  // coll::WaitResult of the failed wait; valid in thread 0
    bool synced;      // no data access by this block since its last barrier
  };

  __device__ static Ctx makeCtx(const algo::CollArgs& args, int channel) {
    return Ctx{args.abortFlag, args.timeoutNs, args.pos, channel, coll::kWaitOk, true};
  }

  // Returns in every thread once *flag >= target (acquire, see the header),
  // or false in every thread on abort or timeout (thread 0's ctx.failure
  // says which). The verdict is broadcast by the barrier's own reduction
  // (bar.red.or), so no shared word can be overwritten by a next wait while
  // a slow thread still reads it.
  __device__ static bool waitGeq(Ctx& ctx, const uint64_t* flag, uint64_t target) {
    int result = coll::kWaitOk;
    if (threadIdx.x == 0 && coll::loadAcquireSys(flag) < target) {
      result = coll::pollGeq(flag, target, ctx.abortFlag, ctx.timeoutNs, ctx.pos, ctx.channel);
      ctx.failure = result;
    }
    const int failed = __syncthreads_or(result != coll::kWaitOk);
    ctx.synced = true;
    return failed == 0;
  }

  // Publishes `value` into *flag (a peer's memory, or ours) after every
  // thread's accesses of the step (release, see the header). Two posts in a
  // row (send and receive counters of one step) share the barrier.
  __device__ static void post(Ctx& ctx, uint64_t* flag, uint64_t value) {
    if (!ctx.synced) {
      __syncthreads();  // every thread's slot/output accesses precede ...
      ctx.synced = true;
    }
    // ... this cumulative system-scope release, read by the peer's acquire.
    if (threadIdx.x == 0) coll::storeReleaseSys(flag, value);
  }

  // Thread 0 (the one that posts) stores the word; its post's release,
  // later in its program order, publishes it with the slot.
  __device__ static void note(Ctx&, uint64_t* word, uint64_t value) {
    if (threadIdx.x == 0) {
      asm volatile("st.relaxed.sys.u64 [%0], %1;" : : "l"(word), "l"(value) : "memory");
    }
  }

  // ---- LL (algo/coll_ll.h): thread t takes lines t, t + blockDim.x, ... ----
  // Ends with one barrier, which also orders every thread's line reads
  // before postHead. A failure anywhere fails every thread; thread 0 learns
  // whether any thread timed out (then the kernel traps).
  template <class T, class Op>
  __device__ static bool llStep(Ctx& ctx, const Op& op, const T* local, const algo::LlLine* recv,
                                uint32_t recvFlag, const algo::LlSendTo& send, T* dst, uint64_t n,
                                bool final) {
    const algo::LlWait wait{ctx.abortFlag, ctx.timeoutNs, ctx.pos, ctx.channel};
    const int r = coll::llLines<T, Op>(wait, op, local, recv, recvFlag, send, dst, n, final);
    ctx.synced = true;
    if (__syncthreads_or(r != coll::kWaitOk) == 0) return true;
    const int timedOut = __syncthreads_or(r == coll::kWaitTimedOut);
    if (threadIdx.x == 0) {
      ctx.failure = timedOut != 0 ? coll::kWaitTimedOut : coll::kWaitAborted;
      if (timedOut != 0) {
        printf(
            "ferry: collective kernel timed out (LL): ring position %d channel %d waited for a "
            "peer's FIFO line (peer stalled or dead; FERRY_COLL_TIMEOUT)\n",
            ctx.pos, ctx.channel);
      }
    }
    return false;
  }

  // After llStep: every thread's reads of the step have returned (each was
  // checked for its flag before the barrier), so a relaxed store suffices to
  // let the sender reuse the slot; it avoids a system-scope fence per step.
  __device__ static void postHead(Ctx&, uint64_t* flag, uint64_t value) {
    if (threadIdx.x == 0) {
      asm volatile("st.relaxed.sys.u64 [%0], %1;" : : "l"(flag), "l"(value) : "memory");
    }
  }

  template <class T, class Op>
  __device__ static void reduceCopy(Ctx& ctx, const Op& op, const T* local, const T* fifo, T* dst0,
                                    T* dst1, uint64_t n, bool final) {
    ctx.synced = false;
    coll::reduceCopy<T, Op>(op, local, fifo, dst0, dst1, n, final);
  }
};

}  // namespace ferry::device
