// ferry-ce-alltoall: how fast can copy engines alone move an all-to-all
// among N GPUs (one process, every GPU of the machine, peer access on)? Two
// GPUs' sendrecv is one push per direction (~390 GB/s, ce_split.cu); with
// four GPUs on NVSwitch, SM-free alltoall at 256 MiB read 0.60x NCCL
// (session 27), and this probe says whether the copy engines or Ferry's
// protocol set that bound.
//
// Usage: ferry-ce-alltoall [bytes per peer] [iters] [pieces]
// Each line: a pattern, its time per iteration (iters back to back, every
// stream of an iteration joined before the next starts, host clock over the
// run) and the bytes each GPU sends to its peers per second (busbw as
// nccl-tests counts alltoall: the self block excluded):
//   push/streams   each GPU pushes to every peer, one stream per peer
//   push/one       the same pushes on one stream per GPU, one after another
//   push/rotated   one stream per peer, GPU g starts with peer g+1 (not all
//                  GPUs writing into the same peer first)
//   pull/streams   each GPU pulls from every peer, one stream per peer
//   push+self      push/streams plus each GPU's self block (a local copy)
//   push/pieces    push/streams with each copy cut into `pieces` (default
//                  8), issued piece by piece across the peers' streams in
//                  call order: whether interleaving alone spreads the load
//                  when GPUs do not start their rounds together
//   push/pieces/rot the same, peers rotated
//   push/pieces/seq every piece of peer 1's copy, then of peer 2's, ...
//                  (call order, one stream per peer): fast only if the
//                  engine alternates between streams at piece boundaries,
//                  i.e. if pieces would help copies that become runnable at
//                  different times (gated by their receivers' flags)
//   gated/whole    rotated whole pushes, each stream first running a
//                  one-thread kernel that spins 0-300 us (random per GPU,
//                  peer and iteration): copies that become runnable at
//                  different times, as Ferry's do when each waits on the GPU
//                  for its receiver's `ready`
//   gated/pieces   the same spins, then the pushes in pieces round-robin
//                  (both gated rows count the spins in their time: compare
//                  them with each other, not with the ungated rows)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

namespace {

struct Gpu {
  char* send = nullptr;               // n blocks: block p goes to GPU p
  char* recv = nullptr;               // n blocks: block p came from GPU p
  std::vector<cudaStream_t> streams;  // one per peer (index = peer)
};

enum class Pattern {
  PushStreams,
  PushOne,
  PushRotated,
  PullStreams,
  PushSelf,
  PushPieces,
  PushPiecesRotated,
  PushPiecesSeq,
  GatedWhole,
  GatedPieces
};

// Spins one thread for `cycles` clock cycles: a stream that becomes ready
// late (the copies behind it wait for it).
__global__ void spinFor(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

unsigned gGateSeed = 12345u;
long long gClockKHz = 1500000;  // device 0's clock, for the spins

// A spin of 0-300 us on every peer stream of every GPU (a new draw per call).
void issueGates(std::vector<Gpu>& g) {
  const int n = static_cast<int>(g.size());
  for (int src = 0; src < n; ++src) {
    CHECK(cudaSetDevice(src));
    for (int dst = 0; dst < n; ++dst) {
      if (dst == src) continue;
      gGateSeed = gGateSeed * 1103515245u + 12345u;
      const long long us = (gGateSeed >> 8) % 301;
      spinFor<<<1, 1, 0, g[src].streams[dst]>>>(us * gClockKHz / 1000);
      CHECK(cudaGetLastError());
    }
  }
}

int gPieces = 8;

// Pushes from every GPU cut into gPieces pieces on the peers' streams:
// round-robin over the peers (piece 0 to every peer, then piece 1, ...),
// or peer by peer (`byPeer`).
void issuePieces(std::vector<Gpu>& g, bool rotated, bool byPeer, size_t bytes) {
  const int n = static_cast<int>(g.size());
  const size_t piece = (bytes + gPieces - 1) / gPieces;
  auto one = [&](int src, int k, size_t off) {
    const int dst = rotated ? (src + k) % n : (k <= src ? k - 1 : k);
    const size_t len = bytes - off < piece ? bytes - off : piece;
    CHECK(cudaMemcpyAsync(g[dst].recv + src * bytes + off, g[src].send + dst * bytes + off, len,
                          cudaMemcpyDefault, g[src].streams[dst]));
  };
  for (int src = 0; src < n; ++src) {
    CHECK(cudaSetDevice(src));
    if (byPeer) {
      for (int k = 1; k < n; ++k) {
        for (size_t off = 0; off < bytes; off += piece) one(src, k, off);
      }
      continue;
    }
    for (size_t off = 0; off < bytes; off += piece) {
      for (int k = 1; k < n; ++k) one(src, k, off);
    }
  }
}

// Issues one iteration of `pat`; the caller joins every stream after it.
void issue(std::vector<Gpu>& g, Pattern pat, size_t bytes) {
  const int n = static_cast<int>(g.size());
  if (pat == Pattern::GatedWhole || pat == Pattern::GatedPieces) {
    issueGates(g);
    const int saved = gPieces;
    if (pat == Pattern::GatedWhole) gPieces = 1;
    issuePieces(g, true, false, bytes);
    gPieces = saved;
    return;
  }
  if (pat == Pattern::PushPieces || pat == Pattern::PushPiecesRotated ||
      pat == Pattern::PushPiecesSeq) {
    issuePieces(g, pat == Pattern::PushPiecesRotated, pat == Pattern::PushPiecesSeq, bytes);
    return;
  }
  for (int src = 0; src < n; ++src) {
    for (int k = 1; k < n; ++k) {
      const int dst = pat == Pattern::PushRotated ? (src + k) % n : (k <= src ? k - 1 : k);
      if (dst == src) continue;
      const bool pull = pat == Pattern::PullStreams;
      const int by = pull ? dst : src;  // the GPU whose copy engine moves it
      const int slot = pat == Pattern::PushOne ? 0 : (pull ? src : dst);
      CHECK(cudaSetDevice(by));
      CHECK(cudaMemcpyAsync(g[dst].recv + src * bytes, g[src].send + dst * bytes, bytes,
                            cudaMemcpyDefault, g[by].streams[slot]));
    }
    if (pat == Pattern::PushSelf) {
      CHECK(cudaSetDevice(src));
      CHECK(cudaMemcpyAsync(g[src].recv + src * bytes, g[src].send + src * bytes, bytes,
                            cudaMemcpyDefault, g[src].streams[src]));
    }
  }
}

void joinAll(std::vector<Gpu>& g) {
  for (size_t d = 0; d < g.size(); ++d) {
    CHECK(cudaSetDevice(static_cast<int>(d)));
    for (cudaStream_t s : g[d].streams) CHECK(cudaStreamSynchronize(s));
  }
}

double run(std::vector<Gpu>& g, Pattern pat, size_t bytes, int iters) {
  issue(g, pat, bytes);  // warm-up
  joinAll(g);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    issue(g, pat, bytes);
    joinAll(g);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t{64} << 20);
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  if (argc > 3) gPieces = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "ferry-ce-alltoall: needs 2 or more GPUs (found %d)\n", n);
    return 2;
  }
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  if (khz > 0) gClockKHz = khz;
  std::vector<Gpu> g(n);
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    for (int p = 0; p < n; ++p) {
      if (p == d) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
      (void)cudaGetLastError();
    }
    CHECK(cudaMalloc(&g[d].send, bytes * n));
    CHECK(cudaMalloc(&g[d].recv, bytes * n));
    CHECK(cudaMemset(g[d].send, d + 1, bytes * n));
    g[d].streams.resize(n);
    for (int p = 0; p < n; ++p) {
      CHECK(cudaStreamCreateWithFlags(&g[d].streams[p], cudaStreamNonBlocking));
    }
  }
  const struct {
    const char* name;
    Pattern pat;
  } kinds[] = {{"push/streams", Pattern::PushStreams},
               {"push/one", Pattern::PushOne},
               {"push/rotated", Pattern::PushRotated},
               {"pull/streams", Pattern::PullStreams},
               {"push+self", Pattern::PushSelf},
               {"push/pieces", Pattern::PushPieces},
               {"push/pieces/rot", Pattern::PushPiecesRotated},
               {"push/pieces/seq", Pattern::PushPiecesSeq},
               {"gated/whole", Pattern::GatedWhole},
               {"gated/pieces", Pattern::GatedPieces}};
  printf("# %d GPUs, %zu bytes per peer, %d iterations, %d pieces\n", n, bytes, iters, gPieces);
  for (const auto& k : kinds) {
    const double sec = run(g, k.pat, bytes, iters);
    const double sent = static_cast<double>(bytes) * (n - 1);
    printf("%-15s %9.1f us  %7.1f GB/s per GPU\n", k.name, sec * 1e6, sent / sec / 1e9);
  }
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    for (cudaStream_t s : g[d].streams) CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(g[d].send));
    CHECK(cudaFree(g[d].recv));
  }
  return 0;
}
