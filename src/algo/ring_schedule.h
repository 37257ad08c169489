// Ring schedules: pure arithmetic saying which piece of a buffer each ring
// position sends and receives at each step of a ring collective. Shared by
// the CUDA kernels (DESIGN.md layer 8) and the host runtime's CPU path, and
// unit tested on the CPU (tests/unit/algo_ring_test.cc simulates every
// collective with these functions alone).
//
// Positions, not ranks: `pos` is a rank's index in the ring order (it sends
// to pos+1 and receives from pos-1, mod n). For all-reduce any bijection of
// chunks is fine, so chunk c is just c. For all-gather and reduce-scatter the
// chunk index returned is the ring position whose rank owns that block; the
// caller maps it with ring[chunk] to a rank (and so a buffer offset).
//
// Buffer layout, three levels, all in elements (uint64_t: counts > 2^32 ok):
//   chunk   c  in [0, nchunks): chunkOffset(c) = min(c * chunkStride, total),
//              chunkCount(c) = min(chunkStride, total - chunkOffset(c)).
//   channel h  in [0, nchannels) inside a chunk of length L:
//              stride_h = roundUp(ceilDiv(L, nchannels), align),
//              offset = min(h * stride_h, L), count = min(stride_h, L - offset).
//   slice   s  in [0, sliceCount) inside a (chunk, channel) piece of length P:
//              sliceCount = ceilDiv(P, sliceStride), offset = s * sliceStride,
//              count = min(sliceStride, P - offset); sliceStride = whole piece
//              when sliceElts == 0.
//   align = 16 / eltBytes elements when eltBytes divides 16, else 1, so every
//   piece starts 16 bytes from its chunk's start (from the buffer's start when
//   chunks are aligned, as for all-reduce and broadcast/reduce). Trailing
//   pieces may be short or empty (count 0); the pieces of a chunk tile it
//   exactly once, and the chunks tile [0, total) exactly once.
//
// Threading: values and pure functions; a RingLayout is trivially copyable,
// made on the host and passed to kernels by value.
#pragma once

#include <cstdint>
#include <type_traits>

#include "algo/reduce_ops.h"  // FERRY_HD

namespace ferry::algo {

FERRY_HD inline uint64_t ceilDiv(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}
FERRY_HD inline uint64_t roundUp(uint64_t a, uint64_t b) {
  return ceilDiv(a, b) * b;
}
FERRY_HD inline uint64_t minU64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}
// x mod n in [0, n) for any sign of x; n > 0.
FERRY_HD inline int ringMod(int64_t x, int n) {
  int64_t r = x % n;
  return static_cast<int>(r < 0 ? r + n : r);
}
// Elements per 16 bytes, when the element size divides 16.
FERRY_HD inline uint64_t alignElts(uint32_t eltBytes) {
  return eltBytes != 0 && eltBytes <= 16 && 16 % eltBytes == 0 ? 16 / eltBytes : 1;
}

// An element range.
struct Range {
  uint64_t offset;
  uint64_t count;
};

struct RingLayout {
  uint64_t total;        // elements in the whole buffer
  uint64_t chunkStride;  // elements per chunk (the last ones may be short)
  uint64_t align;        // element alignment of channel/slice offsets
  uint64_t sliceStride;  // elements per slice; 0 = one slice per piece
  int nchunks;
  int nchannels;

  // All-reduce: `count` elements split into nranks aligned chunks.
  FERRY_HD static RingLayout allReduce(uint64_t count, uint32_t eltBytes, int nranks, int nchannels,
                                       uint64_t sliceElts) {
    uint64_t a = alignElts(eltBytes);
    return make(count, roundUp(ceilDiv(count, static_cast<uint64_t>(nranks)), a), a, sliceElts,
                nranks, nchannels);
  }
  // All-gather output / reduce-scatter input: nranks blocks of `perRank`
  // elements, block k at k * perRank (as the API lays them out).
  FERRY_HD static RingLayout gather(uint64_t perRank, uint32_t eltBytes, int nranks, int nchannels,
                                    uint64_t sliceElts) {
    return make(perRank * static_cast<uint64_t>(nranks), perRank, alignElts(eltBytes), sliceElts,
                nranks, nchannels);
  }
  // Broadcast / reduce: one chunk, the whole buffer, pipelined by slices.
  FERRY_HD static RingLayout pipeline(uint64_t count, uint32_t eltBytes, int nchannels,
                                      uint64_t sliceElts) {
    return make(count, count, alignElts(eltBytes), sliceElts, 1, nchannels);
  }

  FERRY_HD Range chunk(int c) const {
    uint64_t off = minU64(static_cast<uint64_t>(c) * chunkStride, total);
    return Range{off, minU64(chunkStride, total - off)};
  }
  // Channel h's piece of chunk c, as an absolute element range.
  FERRY_HD Range piece(int c, int h) const {
    Range ch = chunk(c);
    uint64_t stride = roundUp(ceilDiv(ch.count, static_cast<uint64_t>(nchannels)), align);
    uint64_t off = minU64(static_cast<uint64_t>(h) * stride, ch.count);
    return Range{ch.offset + off, minU64(stride, ch.count - off)};
  }
  FERRY_HD uint64_t sliceCount(int c, int h) const {
    uint64_t n = piece(c, h).count;
    if (n == 0) return 0;
    return sliceStride == 0 ? 1 : ceilDiv(n, sliceStride);
  }
  // Slice s (< sliceCount(c, h)) of channel h's piece of chunk c.
  FERRY_HD Range slice(int c, int h, uint64_t s) const {
    Range p = piece(c, h);
    if (sliceStride == 0) return p;
    uint64_t off = minU64(s * sliceStride, p.count);
    return Range{p.offset + off, minU64(sliceStride, p.count - off)};
  }

 private:
  FERRY_HD static RingLayout make(uint64_t total, uint64_t chunkStride, uint64_t align,
                                  uint64_t sliceElts, int nchunks, int nchannels) {
    RingLayout l{};
    l.total = total;
    l.chunkStride = chunkStride;
    l.align = align;
    l.sliceStride = sliceElts == 0 ? 0 : roundUp(sliceElts, align);
    l.nchunks = nchunks;
    l.nchannels = nchannels < 1 ? 1 : nchannels;
    return l;
  }
};

// Passed to kernels by value.
static_assert(std::is_trivially_copyable_v<RingLayout>, "RingLayout is a kernel argument");

// What one ring position does at one step: send chunk `sendChunk` to pos+1,
// receive chunk `recvChunk` from pos-1 and either reduce it into its own copy
// (`recvReduces`) or store it. `recvFinal`: after this receive the chunk
// holds its final value (write it to the output). Chunks are -1 when none.
struct RingStep {
  int sendChunk;
  int recvChunk;
  bool recvReduces;
  bool recvFinal;
};

// All-reduce = reduce-scatter phase (steps 0..n-2) then all-gather phase
// (steps n-1..2n-3). Reduce-scatter step s: position p sends chunk p-s (its
// own at s = 0, afterwards the one it reduced at s-1) and receives chunk
// p-s-1, reducing it; after step n-2 it holds chunk p+1 fully reduced.
// All-gather step t = s-(n-1): p sends chunk p+1-t (the reduced one at t = 0,
// afterwards the one received at t-1) and receives chunk p-t, storing it.
// Check: what p+1 receives, (p+1)-s-1 = p-s resp. (p+1)-t = p+1-t, is what
// p sends.
FERRY_HD inline int allReduceSteps(int n) {
  return n > 1 ? 2 * (n - 1) : 0;
}
FERRY_HD inline RingStep allReduceStep(int pos, int n, int step) {
  if (step < n - 1)
    return RingStep{ringMod(pos - step, n), ringMod(pos - step - 1, n), true, step == n - 2};
  int t = step - (n - 1);
  return RingStep{ringMod(pos + 1 - t, n), ringMod(pos - t, n), false, true};
}

// All-gather, n-1 steps: step s, p sends chunk p-s (its own at s = 0) and
// stores chunk p-s-1 (what p-1 sent). Every chunk but p's own arrives once.
FERRY_HD inline int allGatherSteps(int n) {
  return n > 1 ? n - 1 : 0;
}
FERRY_HD inline RingStep allGatherStep(int pos, int n, int step) {
  return RingStep{ringMod(pos - step, n), ringMod(pos - step - 1, n), false, true};
}

// Reduce-scatter, n-1 steps: step s, p sends chunk p-s-1 (its own input's
// block at s = 0, afterwards the partial sum it reduced at s-1) and receives
// chunk p-s-2, reducing it; the last receive (s = n-2) is chunk p itself,
// complete: p's output.
FERRY_HD inline int reduceScatterSteps(int n) {
  return n > 1 ? n - 1 : 0;
}
FERRY_HD inline RingStep reduceScatterStep(int pos, int n, int step) {
  return RingStep{ringMod(pos - step - 1, n), ringMod(pos - step - 2, n), true, step == n - 2};
}

// Pipelines (broadcast, reduce) along the ring as a chain of n positions.
// dist = a position's place in the chain: 0 sends first, n-1 only receives.
// Broadcast starts at the root: dist = pos - root. Reduce ends at the root:
// dist = pos - root - 1, so the root is last and receives the total.
FERRY_HD inline int broadcastDist(int pos, int root, int n) {
  return ringMod(pos - root, n);
}
FERRY_HD inline int reduceDist(int pos, int root, int n) {
  return ringMod(pos - root - 1, n);
}

// Each channel pipelines its own slices independently (per channel, nslices
// = RingLayout::sliceCount(0, h)). Slice k leaves dist d at step k + d and
// reaches dist d+1 in that same step, so in step s dist d sends slice s-d
// (d < n-1) and receives slice s-d+1 (d > 0); steps = nslices + n - 2.
// A broadcast receiver stores (and forwards) the slice; a reduce receiver
// reduces it with its own input and forwards the partial result; at dist n-1
// (the root) that is the final value.
FERRY_HD inline int64_t pipelineSteps(int n, uint64_t nslices) {
  return n > 1 && nslices > 0 ? static_cast<int64_t>(nslices) + n - 2 : 0;
}
// Slice index sent at `step`, or -1 when this dist sends nothing then.
FERRY_HD inline int64_t pipelineSendSlice(int dist, int n, uint64_t nslices, int64_t step) {
  int64_t k = step - dist;
  return dist < n - 1 && k >= 0 && k < static_cast<int64_t>(nslices) ? k : -1;
}
// Slice index received at `step`, or -1.
FERRY_HD inline int64_t pipelineRecvSlice(int dist, int n, uint64_t nslices, int64_t step) {
  int64_t k = step - dist + 1;
  return dist > 0 && dist < n && k >= 0 && k < static_cast<int64_t>(nslices) ? k : -1;
}

}  // namespace ferry::algo
