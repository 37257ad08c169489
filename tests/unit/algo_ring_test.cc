// src/algo/ring_schedule.h: the layout tiles buffers exactly once, and a CPU
// simulation of every ring collective driven ONLY by the schedule functions
// gives every rank the right result element-wise. Random ranks (1..9),
// channels (1..4), slice sizes and ring orders each run; the seed is printed
// (reproduce with FERRY_TEST_SEED).
//
// Simulation model: one step = every position sends, per channel, the slices
// of its send chunk (a FIFO per (receiver, channel)); then every position
// pops the slices of its receive chunk, checks that the range the sender
// described is the range it computed itself, and reduces or stores them.
// Sends are snapshots taken before the step's receives, as on real hardware
// where a step's send reads what earlier steps received.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include "algo/reduce_ops.h"
#include "algo/ring_schedule.h"
#include "common/random.h"

namespace ferry::algo {
namespace {

using test::Rng;
using Buf = std::vector<int64_t>;

constexpr int64_t kPoison = INT64_MIN + 0x5a5a;
const uint64_t kCounts[] = {0, 1, 7, 13, 101, 1009, 7919, (1u << 20) + 3};

Rng makeRng(uint64_t stream) {
  return Rng(test::testSeed(), stream);
}

uint64_t randomSlice(Rng& rng) {
  switch (rng.below(3)) {
    case 0:
      return 0;  // one slice per piece
    case 1:
      return rng.range(1, 64);
    default:
      return rng.range(1000, 70000);
  }
}

std::vector<int> randomRing(int n, Rng& rng) {
  std::vector<int> ring(n);
  std::iota(ring.begin(), ring.end(), 0);
  for (int i = n - 1; i > 0; --i) std::swap(ring[i], ring[rng.below(i + 1)]);
  return ring;
}

Buf randomBuf(uint64_t count, Rng& rng) {
  Buf b(count);
  for (auto& x : b) x = rng.range(-(int64_t{1} << 40), int64_t{1} << 40);
  return b;
}

struct Message {
  Range range;
  Buf data;
};

// ---- layout coverage ---------------------------------------------------------------

// Every (chunk, channel, slice) lies in its parent, starts aligned relative to
// its chunk and the slices tile [0, total) exactly once.
void checkCoverage(const RingLayout& l, uint64_t eltBytes) {
  std::vector<uint8_t> hits(l.total, 0);
  uint64_t align = alignElts(static_cast<uint32_t>(eltBytes));
  for (int c = 0; c < l.nchunks; ++c) {
    Range ch = l.chunk(c);
    for (int h = 0; h < l.nchannels; ++h) {
      Range p = l.piece(c, h);
      ASSERT_GE(p.offset, ch.offset);
      ASSERT_LE(p.offset + p.count, ch.offset + ch.count);
      if (p.count) ASSERT_EQ((p.offset - ch.offset) % align, 0u);
      uint64_t ns = l.sliceCount(c, h);
      for (uint64_t s = 0; s < ns; ++s) {
        Range sl = l.slice(c, h, s);
        ASSERT_GT(sl.count, 0u) << "empty slice " << s << " of " << ns;
        ASSERT_GE(sl.offset, p.offset);
        ASSERT_LE(sl.offset + sl.count, p.offset + p.count);
        ASSERT_EQ((sl.offset - ch.offset) % align, 0u);
        for (uint64_t i = sl.offset; i < sl.offset + sl.count; ++i) {
          ASSERT_EQ(hits[i], 0) << "element " << i << " covered twice";
          hits[i] = 1;
        }
      }
    }
  }
  for (uint64_t i = 0; i < l.total; ++i) ASSERT_EQ(hits[i], 1) << "element " << i << " not covered";
}

TEST(AlgoRing, LayoutsTileExactlyOnce) {
  Rng rng = makeRng(10);
  for (uint64_t count : kCounts) {
    for (int rep = 0; rep < (count > 100000 ? 2 : 6); ++rep) {
      int n = static_cast<int>(rng.range(1, 9)), nch = static_cast<int>(rng.range(1, 4));
      uint32_t elt = std::vector<uint32_t>{1, 2, 4, 8, 3, 12}[rng.below(6)];
      uint64_t slice = randomSlice(rng);
      SCOPED_TRACE("count " + std::to_string(count) + " n " + std::to_string(n) + " ch " +
                   std::to_string(nch) + " elt " + std::to_string(elt) + " slice " +
                   std::to_string(slice));
      checkCoverage(RingLayout::allReduce(count, elt, n, nch, slice), elt);
      checkCoverage(RingLayout::gather(count / n + (count % 2), elt, n, nch, slice), elt);
      checkCoverage(RingLayout::pipeline(count, elt, nch, slice), elt);
    }
  }
}

// Counts beyond 2^32: arithmetic only (contiguity and sums, no buffers).
TEST(AlgoRing, HugeCountsArithmetic) {
  Rng rng = makeRng(11);
  const uint64_t huge = (uint64_t{1} << 33) + 5;
  for (int rep = 0; rep < 50; ++rep) {
    int n = static_cast<int>(rng.range(1, 9)), nch = static_cast<int>(rng.range(1, 4));
    uint32_t elt = std::vector<uint32_t>{1, 2, 4, 8}[rng.below(4)];
    uint64_t slice = rng.range(1, 1 << 22);
    RingLayout layouts[] = {RingLayout::allReduce(huge, elt, n, nch, slice),
                            RingLayout::gather(huge, elt, n, nch, slice),
                            RingLayout::pipeline(huge, elt, nch, slice)};
    for (const RingLayout& l : layouts) {
      uint64_t next = 0;
      for (int c = 0; c < l.nchunks; ++c) {
        Range ch = l.chunk(c);
        ASSERT_EQ(ch.offset, next);
        uint64_t pnext = ch.offset;
        for (int h = 0; h < l.nchannels; ++h) {
          Range p = l.piece(c, h);
          ASSERT_EQ(p.offset, pnext);
          pnext += p.count;
          uint64_t ns = l.sliceCount(c, h);
          if (p.count == 0) {
            ASSERT_EQ(ns, 0u);
            continue;
          }
          Range first = l.slice(c, h, 0), last = l.slice(c, h, ns - 1);
          uint64_t mid = rng.below(ns);
          Range m = l.slice(c, h, mid), m1 = l.slice(c, h, mid + 1 < ns ? mid + 1 : mid);
          ASSERT_EQ(first.offset, p.offset);
          ASSERT_EQ(last.offset + last.count, p.offset + p.count);
          ASSERT_GT(last.count, 0u);
          if (mid + 1 < ns) ASSERT_EQ(m.offset + m.count, m1.offset);
          ASSERT_EQ((m.offset - ch.offset) % alignElts(elt), 0u);
        }
        ASSERT_EQ(pnext, ch.offset + ch.count);
        next += ch.count;
      }
      ASSERT_EQ(next, l.total);
      ASSERT_GT(l.total, uint64_t{1} << 32);
    }
  }
}

// ---- ring simulation -----------------------------------------------------------------

// Runs `steps` ring steps over `work` (one buffer per position). stepOf(p, s)
// gives the RingStep; chunkOf(c) maps a schedule chunk to a layout chunk.
template <class StepOf, class ChunkOf>
void runRing(const RingLayout& l, std::vector<Buf>& work, int steps, StepOf stepOf,
             ChunkOf chunkOf) {
  int n = static_cast<int>(work.size());
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<std::deque<Message>>> fifo(
        n, std::vector<std::deque<Message>>(l.nchannels));
    for (int p = 0; p < n; ++p) {
      int c = chunkOf(stepOf(p, s).sendChunk);
      for (int h = 0; h < l.nchannels; ++h) {
        for (uint64_t k = 0; k < l.sliceCount(c, h); ++k) {
          Range r = l.slice(c, h, k);
          fifo[(p + 1) % n][h].push_back(
              Message{r, Buf(work[p].begin() + r.offset, work[p].begin() + r.offset + r.count)});
        }
      }
    }
    for (int p = 0; p < n; ++p) {
      RingStep st = stepOf(p, s);
      int c = chunkOf(st.recvChunk);
      for (int h = 0; h < l.nchannels; ++h) {
        for (uint64_t k = 0; k < l.sliceCount(c, h); ++k) {
          ASSERT_FALSE(fifo[p][h].empty())
              << "step " << s << " pos " << p << " expects more slices";
          Message m = std::move(fifo[p][h].front());
          fifo[p][h].pop_front();
          Range r = l.slice(c, h, k);
          ASSERT_EQ(m.range.offset, r.offset) << "step " << s << " pos " << p;
          ASSERT_EQ(m.range.count, r.count) << "step " << s << " pos " << p;
          for (uint64_t i = 0; i < r.count; ++i) {
            int64_t& dst = work[p][r.offset + i];
            dst = st.recvReduces ? Sum<int64_t>{}(dst, m.data[i]) : m.data[i];
          }
        }
        ASSERT_TRUE(fifo[p][h].empty()) << "step " << s << " pos " << p << " left slices unread";
      }
    }
  }
}

struct Case {
  int n, nch;
  uint64_t count, slice;
  std::vector<int> ring;
  std::string name() const {
    return "n " + std::to_string(n) + " ch " + std::to_string(nch) + " count " +
           std::to_string(count) + " slice " + std::to_string(slice);
  }
};

std::vector<Case> randomCases(Rng& rng) {
  std::vector<Case> cases;
  for (uint64_t count : kCounts) {
    for (int rep = 0; rep < (count > 100000 ? 1 : 5); ++rep) {
      Case c{static_cast<int>(rng.range(1, 9)),
             static_cast<int>(rng.range(1, 4)),
             count,
             randomSlice(rng),
             {}};
      if (count > 100000 && c.slice != 0 && c.slice < 1000) c.slice = 4096;  // keep the run short
      c.ring = randomRing(c.n, rng);
      cases.push_back(c);
    }
  }
  return cases;
}

TEST(AlgoRing, AllReduceSimulation) {
  Rng rng = makeRng(12);
  for (const Case& k : randomCases(rng)) {
    SCOPED_TRACE(k.name());
    std::vector<Buf> in(k.n), work(k.n);
    Buf want(k.count, 0);
    for (int r = 0; r < k.n; ++r) {
      in[r] = randomBuf(k.count, rng);
      for (uint64_t i = 0; i < k.count; ++i) want[i] += in[r][i];
    }
    for (int p = 0; p < k.n; ++p) work[p] = in[k.ring[p]];
    RingLayout l = RingLayout::allReduce(k.count, 8, k.n, k.nch, k.slice);
    int finals = 0;
    for (int s = 0; s < allReduceSteps(k.n); ++s) finals += allReduceStep(0, k.n, s).recvFinal;
    EXPECT_EQ(finals, k.n > 1 ? k.n : 0);  // every chunk becomes final once at each position
    runRing(
        l, work, allReduceSteps(k.n), [&](int p, int s) { return allReduceStep(p, k.n, s); },
        [](int c) { return c; });
    for (int p = 0; p < k.n; ++p) ASSERT_EQ(work[p], want) << "position " << p;
  }
}

TEST(AlgoRing, AllGatherSimulation) {
  Rng rng = makeRng(13);
  for (Case k : randomCases(rng)) {
    k.count = k.count > 100000 ? k.count / k.n + 1 : k.count;  // per rank
    SCOPED_TRACE(k.name());
    uint64_t total = k.count * k.n;
    Buf want(total);
    std::vector<Buf> work(k.n, Buf(total, kPoison));
    for (int r = 0; r < k.n; ++r) {
      Buf mine = randomBuf(k.count, rng);
      std::copy(mine.begin(), mine.end(), want.begin() + r * k.count);
    }
    for (int p = 0; p < k.n; ++p) {
      uint64_t off = k.ring[p] * k.count;
      std::copy(want.begin() + off, want.begin() + off + k.count, work[p].begin() + off);
    }
    RingLayout l = RingLayout::gather(k.count, 8, k.n, k.nch, k.slice);
    runRing(
        l, work, allGatherSteps(k.n), [&](int p, int s) { return allGatherStep(p, k.n, s); },
        [&](int c) { return k.ring[c]; });
    for (int p = 0; p < k.n; ++p) ASSERT_EQ(work[p], want) << "position " << p;
  }
}

TEST(AlgoRing, ReduceScatterSimulation) {
  Rng rng = makeRng(14);
  for (Case k : randomCases(rng)) {
    k.count = k.count > 100000 ? k.count / k.n + 1 : k.count;  // per rank
    SCOPED_TRACE(k.name());
    uint64_t total = k.count * k.n;
    Buf want(total, 0);
    std::vector<Buf> in(k.n), work(k.n);
    for (int r = 0; r < k.n; ++r) {
      in[r] = randomBuf(total, rng);
      for (uint64_t i = 0; i < total; ++i) want[i] += in[r][i];
    }
    for (int p = 0; p < k.n; ++p) work[p] = in[k.ring[p]];
    for (int p = 0; p < k.n && k.n > 1; ++p) {  // the last receive is the position's own chunk
      RingStep last = reduceScatterStep(p, k.n, k.n - 2);
      EXPECT_TRUE(last.recvFinal);
      EXPECT_EQ(last.recvChunk, p);
    }
    RingLayout l = RingLayout::gather(k.count, 8, k.n, k.nch, k.slice);
    runRing(
        l, work, reduceScatterSteps(k.n),
        [&](int p, int s) { return reduceScatterStep(p, k.n, s); },
        [&](int c) { return k.ring[c]; });
    for (int p = 0; p < k.n; ++p) {
      uint64_t off = k.ring[p] * k.count;
      for (uint64_t i = off; i < off + k.count; ++i)
        ASSERT_EQ(work[p][i], want[i]) << "position " << p << " element " << i;
    }
  }
}

// Broadcast (reduce = false) or reduce along the ring chain, every channel
// pipelining its own slices. Returns nothing; checks in place.
void runPipeline(const Case& k, bool reduce, Rng& rng) {
  int root = static_cast<int>(rng.below(k.n));  // a rank
  int rootPos = static_cast<int>(std::find(k.ring.begin(), k.ring.end(), root) - k.ring.begin());
  RingLayout l = RingLayout::pipeline(k.count, 8, k.nch, k.slice);
  std::vector<Buf> in(k.n), work(k.n);
  Buf want(k.count, 0);
  for (int r = 0; r < k.n; ++r) {
    in[r] = randomBuf(k.count, rng);
    for (uint64_t i = 0; i < k.count; ++i) want[i] += in[r][i];
  }
  if (!reduce) want = in[root];
  for (int p = 0; p < k.n; ++p)
    work[p] = reduce || p == rootPos ? in[k.ring[p]] : Buf(k.count, kPoison);
  auto dist = [&](int p) {
    return reduce ? reduceDist(p, rootPos, k.n) : broadcastDist(p, rootPos, k.n);
  };
  ASSERT_EQ(dist(rootPos), reduce ? k.n - 1 : 0);
  for (int h = 0; h < k.nch; ++h) {
    uint64_t ns = l.sliceCount(0, h);
    for (int64_t s = 0; s < pipelineSteps(k.n, ns); ++s) {
      std::vector<std::deque<Message>> fifo(k.n);
      for (int p = 0; p < k.n; ++p) {
        int64_t sl = pipelineSendSlice(dist(p), k.n, ns, s);
        if (sl < 0) continue;
        Range r = l.slice(0, h, sl);
        fifo[(p + 1) % k.n].push_back(
            Message{r, Buf(work[p].begin() + r.offset, work[p].begin() + r.offset + r.count)});
      }
      for (int p = 0; p < k.n; ++p) {
        int64_t sl = pipelineRecvSlice(dist(p), k.n, ns, s);
        if (sl < 0) {
          ASSERT_TRUE(fifo[p].empty()) << "unexpected slice at pos " << p << " step " << s;
          continue;
        }
        ASSERT_EQ(fifo[p].size(), 1u) << "pos " << p << " step " << s;
        Range r = l.slice(0, h, sl);
        ASSERT_EQ(fifo[p].front().range.offset, r.offset);
        ASSERT_EQ(fifo[p].front().range.count, r.count);
        for (uint64_t i = 0; i < r.count; ++i) {
          int64_t& dst = work[p][r.offset + i];
          dst = reduce ? Sum<int64_t>{}(dst, fifo[p].front().data[i]) : fifo[p].front().data[i];
        }
      }
    }
  }
  if (reduce) {
    ASSERT_EQ(work[rootPos], want) << "root " << root;
  } else {
    for (int p = 0; p < k.n; ++p) ASSERT_EQ(work[p], want) << "position " << p << " root " << root;
  }
}

TEST(AlgoRing, BroadcastSimulation) {
  Rng rng = makeRng(15);
  for (const Case& k : randomCases(rng)) {
    SCOPED_TRACE(k.name());
    runPipeline(k, false, rng);
  }
}

TEST(AlgoRing, ReduceSimulation) {
  Rng rng = makeRng(16);
  for (const Case& k : randomCases(rng)) {
    SCOPED_TRACE(k.name());
    runPipeline(k, true, rng);
  }
}

TEST(AlgoRing, StepFormulasAgreeAcrossNeighbours) {
  // What position p sends at step s is what p+1 receives at step s, for all
  // three step schedules and every n up to 16.
  for (int n = 1; n <= 16; ++n) {
    for (int p = 0; p < n; ++p) {
      int q = (p + 1) % n;
      for (int s = 0; s < allReduceSteps(n); ++s)
        ASSERT_EQ(allReduceStep(p, n, s).sendChunk, allReduceStep(q, n, s).recvChunk);
      for (int s = 0; s < allGatherSteps(n); ++s)
        ASSERT_EQ(allGatherStep(p, n, s).sendChunk, allGatherStep(q, n, s).recvChunk);
      for (int s = 0; s < reduceScatterSteps(n); ++s)
        ASSERT_EQ(reduceScatterStep(p, n, s).sendChunk, reduceScatterStep(q, n, s).recvChunk);
    }
  }
  EXPECT_EQ(allReduceSteps(1), 0);
  EXPECT_EQ(pipelineSteps(1, 5), 0);
  EXPECT_EQ(pipelineSteps(4, 0), 0);
  EXPECT_EQ(pipelineSteps(4, 5), 7);
}

}  // namespace
}  // namespace ferry::algo
