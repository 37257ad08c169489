// A launch's copies to several peers, whose receivers depend on each other
// through this very launch: each copy must wait only for its own receiver
// (NOTES.md trap 61: a copy ordered behind another peer's would deadlock).
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "ferry.h"
#include "mp_check.h"
#include "p2p_util.h"

namespace ferry::test {

// Three ranks (the rest idle). Rank 0 sends to ranks 1 and 2 in one group;
// rank 2 receives from 0 and only then sends to 1; rank 1 receives from 2
// and only then from 0. Rank 1's receive from 0 is posted at once (its CPU
// runs ahead) but its stream gets there only after rank 2's message, which
// needs rank 0's copy to rank 2: a copy to rank 2 that waited for rank 1
// would deadlock. Rank 0 calls last, so it copies both messages as
// the second side, each waiting on the GPU for its receiver. Every byte is checked.
void caseChain(World& w) {
  if (w.nranks < 3) {
    printf("chain: needs 3 ranks: skipped\n");
    return;
  }
  const size_t bytes = (size_t{256} << 10) + 8 * (w.seed % 97) + 3;
  auto msg = [&](int round, int from, int to) {
    auto m = std::make_unique<Message>(w, round, from, to, bytes, BufferKind::Plain);
    if (w.rank == from) m->fillAsSender();
    if (w.rank == to) m->poison();
    return m;
  };
  auto m01 = msg(2001, 0, 1);
  auto m02 = msg(2002, 0, 2);
  auto m21 = msg(2003, 2, 1);
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  const auto t0 = std::chrono::steady_clock::now();
  if (w.rank == 0) {
    // Let ranks 1 and 2 post first (a wait on the CPU, not on a stream).
    EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(m01->buf.data(), bytes, ncclInt8, 1, w.comm, w.stream));
    EXPECT_OK(ncclSend(m02->buf.data(), bytes, ncclInt8, 2, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
  } else if (w.rank == 1) {
    EXPECT_OK(ncclRecv(m21->buf.data(), bytes, ncclInt8, 2, w.comm, w.stream));
    EXPECT_OK(ncclRecv(m01->buf.data(), bytes, ncclInt8, 0, w.comm, w.stream));
    EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  } else if (w.rank == 2) {
    EXPECT_OK(ncclRecv(m02->buf.data(), bytes, ncclInt8, 0, w.comm, w.stream));
    EXPECT_OK(ncclSend(m21->buf.data(), bytes, ncclInt8, 1, w.comm, w.stream));
    EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  } else {
    EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  }
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (w.rank == 1) {
    m21->verify("chain 2->1");
    m01->verify("chain 0->1");
  }
  if (w.rank == 2) m02->verify("chain 0->2");
  printf("chain: rank %d done in %.1f ms\n", w.rank, ms);
}

}  // namespace ferry::test
