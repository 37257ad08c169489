// Many user streams over one communicator's life: the SM-free engine keeps
// one completion fence per user stream (re-recorded by every launch) and
// forgets passed ones once it holds 64 (P2pEngine::recordFence). A program
// that makes a new stream for every exchange walks past that bound; every
// byte must still arrive, streams may be destroyed while the engine still
// knows them, and the communicator's destroy (which waits for every fence)
// must return.
#include <cstdio>
#include <memory>
#include <vector>

#include "ferry.h"
#include "mp_check.h"
#include "p2p_util.h"

namespace ferry::test {

// Pairs of ranks (0-1, 2-3, ...) exchange 96 times, each time on a stream
// made for it; three quarters of the streams are kept (not synchronized)
// until the end: more live streams than the engine remembers, some of
// their fences still pending when it must prune. The rest are synchronized
// and destroyed at once (their handles may come back for later streams).
void caseNewStreams(World& w) {
  if (w.nranks % 2 != 0) return;
  constexpr int kRounds = 96;
  const int peer = w.rank ^ 1;
  const size_t bytes = (size_t{1} << 20) + 8 * (w.seed % 61) + 5;
  std::vector<cudaStream_t> kept;
  std::vector<std::unique_ptr<Message>> pending;
  for (int r = 0; r < kRounds; ++r) {
    auto out = std::make_unique<Message>(w, 3000 + r, w.rank, peer, bytes, BufferKind::Plain);
    auto in = std::make_unique<Message>(w, 3000 + r, peer, w.rank, bytes, BufferKind::Plain);
    out->fillAsSender();
    in->poison();
    cudaStream_t s = nullptr;
    EXPECT_OK(ncclFerryStreamCreate(&s));
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(out->buf.data(), bytes, ncclInt8, peer, w.comm, s));
    EXPECT_OK(ncclRecv(in->buf.data(), bytes, ncclInt8, peer, w.comm, s));
    EXPECT_OK(ncclGroupEnd());
    if (r % 4 != 0) {  // checked at the end: its fence may still be pending
      kept.push_back(s);
      pending.push_back(std::move(out));
      pending.push_back(std::move(in));
      continue;
    }
    EXPECT_OK(ncclFerryStreamSynchronize(s));
    EXPECT_OK(ncclFerryStreamDestroy(s));
    in->verify("new stream");
  }
  for (cudaStream_t s : kept) {
    EXPECT_OK(ncclFerryStreamSynchronize(s));
    EXPECT_OK(ncclFerryStreamDestroy(s));
  }
  for (auto& m : pending) {
    if (m->receiver == w.rank) m->verify("kept stream");
  }
  printf("newstreams: rank %d, %d exchanges on as many streams\n", w.rank, kRounds);
}

}  // namespace ferry::test
