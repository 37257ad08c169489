// ferry-ce-split: can copy engines move more than one GPU's pushes do? A
// peer copy can be driven by the source GPU (push: GPU 0 writes into GPU 1)
// or by the destination GPU (pull: GPU 1 reads from GPU 0). One direction of
// NVLink tops out near 390 GB/s with pushes alone (BASELINE.md, 478 GB/s
// raw), which caps SM-free sendrecv at about NCCL x1.10 at 1 GiB. If a
// message split between a push by the sender and a pull by the receiver goes
// faster, the SM-free path could split large messages the same way.
//
// Usage: ferry-ce-split [bytes] [iters]   (one process, GPUs 0 and 1)
// Each line: a pattern, its time per iteration (iters back to back, every
// stream of an iteration joined before the next starts, host clock over the
// whole run) and the bytes per second per direction:
//   push       GPU 0 -> GPU 1, issued on GPU 0
//   pull       GPU 0 -> GPU 1, issued on GPU 1
//   push+push  the same message in two halves, two streams of GPU 0
//   push+pull  half pushed by GPU 0, half pulled by GPU 1, at once
//   both:push  both directions, each pushed by its sender
//   both:pull  both directions, each pulled by its receiver
//   both:split both directions, each half pushed and half pulled
//   one:both   both directions, both driven by GPU 1 (a pull and a push on
//              two streams): what the SM-free protocol does when one rank
//              arrives second for both messages of an exchange
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

namespace {

// A copy of `len` bytes at `offset` of direction d (0: GPU 0 -> 1, 1: 1 -> 0)
// issued on GPU `by`'s stream `slot`.
struct Copy {
  int dir;
  int by;
  int slot;
  size_t offset;
  size_t len;
};

struct Rig {
  char* src[2] = {};  // src[g]: on GPU g, sent to the other GPU
  char* dst[2] = {};  // dst[g]: on GPU g, received from the other GPU
  cudaStream_t stream[2][2] = {};
  cudaEvent_t done[2][2] = {};
};

void setup(Rig* r, size_t bytes) {
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CHECK(cudaMalloc(&r->src[g], bytes));
    CHECK(cudaMalloc(&r->dst[g], bytes));
    CHECK(cudaMemset(r->src[g], g + 1, bytes));  // touch every page once
    CHECK(cudaMemset(r->dst[g], 0, bytes));
    for (int s = 0; s < 2; ++s) {
      CHECK(cudaStreamCreateWithFlags(&r->stream[g][s], cudaStreamNonBlocking));
      CHECK(cudaEventCreateWithFlags(&r->done[g][s], cudaEventDisableTiming));
    }
  }
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceSynchronize());
  }
}

// One iteration: every stream first waits for every stream's previous
// iteration, then its copies run; the rig's events mark the ends.
void iteration(Rig& r, const std::vector<Copy>& copies) {
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    for (int s = 0; s < 2; ++s) {
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 2; ++t) CHECK(cudaStreamWaitEvent(r.stream[g][s], r.done[h][t], 0));
    }
  }
  for (const Copy& c : copies) {
    CHECK(cudaSetDevice(c.by));
    const int from = c.dir, to = 1 - c.dir;
    CHECK(cudaMemcpyAsync(r.dst[to] + c.offset, r.src[from] + c.offset, c.len, cudaMemcpyDefault,
                          r.stream[c.by][c.slot]));
  }
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    for (int s = 0; s < 2; ++s) CHECK(cudaEventRecord(r.done[g][s], r.stream[g][s]));
  }
}

double timeUs(Rig& r, const std::vector<Copy>& copies, int iters) {
  iteration(r, copies);  // warm-up
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceSynchronize());
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) iteration(r, copies);
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceSynchronize());
  }
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (256ull << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    printf("ferry-ce-split: needs 2 GPUs, found %d\n", n);
    return 77;
  }
  Rig r;
  setup(&r, bytes);
  const size_t half = bytes / 2 / 256 * 256;
  const size_t rest = bytes - half;
  struct Pattern {
    const char* name;
    std::vector<Copy> copies;
  };
  const std::vector<Pattern> patterns = {
      {"push", {{0, 0, 0, 0, bytes}}},
      {"pull", {{0, 1, 0, 0, bytes}}},
      {"push+push", {{0, 0, 0, 0, half}, {0, 0, 1, half, rest}}},
      {"push+pull", {{0, 0, 0, 0, half}, {0, 1, 0, half, rest}}},
      {"both:push", {{0, 0, 0, 0, bytes}, {1, 1, 0, 0, bytes}}},
      {"both:pull", {{0, 1, 0, 0, bytes}, {1, 0, 0, 0, bytes}}},
      {"both:split",
       {{0, 0, 0, 0, half}, {0, 1, 1, half, rest}, {1, 1, 0, 0, half}, {1, 0, 1, half, rest}}},
      {"one:both", {{0, 1, 0, 0, bytes}, {1, 1, 1, 0, bytes}}},
  };
  printf("# ferry-ce-split: %zu bytes, %d iterations\n", bytes, iters);
  for (const Pattern& p : patterns) {
    double us = timeUs(r, p.copies, iters);
    printf("%-11s %10.1f us  %7.1f GB/s per direction\n", p.name, us, bytes / us / 1e3);
  }
  return 0;
}
