// ferry-copy-overlap: do a local device-to-device copy and a peer copy over
// NVLink run side by side on the copy engines, or one after the other? A
// staged SM-free send is exactly that pair (the staging copy on the user's
// stream, the proxy's peer copy on its own stream), and staged sends cost
// far more at 16 MiB than the local copy alone should (NOTES Open 1a).
//
// Usage: ferry-copy-overlap [bytes] [iters]   (one process, GPUs 0 and 1)
// Each line: the pattern and its time per iteration (median of iters, from
// events), plus the rate of the bytes that cross NVLink:
//   local       GPU 0: src -> stage (device-to-device)
//   peer        GPU 0: stage -> GPU 1 (peer copy)
//   both        the two at once, on two streams (independent buffers)
//   staged/P    the staged send: P pieces; piece k's peer copy waits (event)
//               for piece k's local copy
//   staged2/P   the same on both GPUs at once, towards each other (sendrecv)
//   serial(2)   the staged send with both copies on the proxy's stream, in
//               order, no event between them (one way / both ways)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "cuda_check.h"

namespace {

// One GPU's side: a source, a staging buffer, a second pair for "both", the
// peer-facing destination (on the other GPU) and two streams.
struct Side {
  int dev = 0;
  char* src = nullptr;
  char* stage = nullptr;
  char* src2 = nullptr;
  char* stage2 = nullptr;
  char* dstOnPeer = nullptr;  // allocated on the other GPU
  cudaStream_t user = nullptr;
  cudaStream_t proxy = nullptr;
  std::vector<cudaEvent_t> pieces;
};

void setup(Side* s, int dev, int peer, size_t bytes) {
  s->dev = dev;
  CHECK(cudaSetDevice(peer));
  CHECK(cudaMalloc(&s->dstOnPeer, bytes));
  CHECK(cudaSetDevice(dev));
  CHECK(cudaDeviceEnablePeerAccess(peer, 0));
  for (char** p : {&s->src, &s->stage, &s->src2, &s->stage2}) {
    CHECK(cudaMalloc(p, bytes));
    CHECK(cudaMemset(*p, dev + 1, bytes));  // touch every page once
  }
  CHECK(cudaStreamCreateWithFlags(&s->user, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s->proxy, cudaStreamNonBlocking));
  s->pieces.resize(64);
  for (cudaEvent_t& e : s->pieces) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

// Enqueues one staged send of `bytes` in `npieces` pieces on side s.
void stagedSend(Side& s, size_t bytes, int npieces) {
  CHECK(cudaSetDevice(s.dev));
  const size_t piece = (bytes + npieces - 1) / npieces;
  for (int k = 0; k < npieces; ++k) {
    const size_t off = piece * k, len = std::min(piece, bytes - off);
    CHECK(cudaMemcpyAsync(s.stage + off, s.src + off, len, cudaMemcpyDeviceToDevice, s.user));
    CHECK(cudaEventRecord(s.pieces[k], s.user));
    CHECK(cudaStreamWaitEvent(s.proxy, s.pieces[k], 0));
    CHECK(cudaMemcpyAsync(s.dstOnPeer + off, s.stage + off, len, cudaMemcpyDefault, s.proxy));
  }
}

// The staged send with both copies on the proxy's stream: no event between
// them, and the user's stream waits (event) for the local copy only.
void serialSend(Side& s, size_t bytes) {
  CHECK(cudaSetDevice(s.dev));
  CHECK(cudaEventRecord(s.pieces[0], s.user));
  CHECK(cudaStreamWaitEvent(s.proxy, s.pieces[0], 0));
  CHECK(cudaMemcpyAsync(s.stage, s.src, bytes, cudaMemcpyDeviceToDevice, s.proxy));
  CHECK(cudaEventRecord(s.pieces[1], s.proxy));
  CHECK(cudaStreamWaitEvent(s.user, s.pieces[1], 0));
  CHECK(cudaMemcpyAsync(s.dstOnPeer, s.stage, bytes, cudaMemcpyDefault, s.proxy));
}

// Median time (us) of `iters` runs of `body`, measured from an event on
// GPU 0's user stream to events after every stream of both sides.
double timeIt(std::vector<Side*> sides, int iters, const std::function<void()>& body) {
  std::vector<double> us;
  for (int i = 0; i < iters + 2; ++i) {
    for (Side* s : sides) {
      CHECK(cudaSetDevice(s->dev));
      CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaSetDevice(sides[0]->dev));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, sides[0]->user));
    // Every stream starts after `start`, and `stop` after every stream.
    for (Side* s : sides) {
      CHECK(cudaSetDevice(s->dev));
      CHECK(cudaStreamWaitEvent(s->user, start, 0));
      CHECK(cudaStreamWaitEvent(s->proxy, start, 0));
    }
    body();
    CHECK(cudaSetDevice(sides[0]->dev));
    for (Side* s : sides) {
      for (cudaStream_t st : {s->user, s->proxy}) {
        cudaEvent_t done;
        CHECK(cudaSetDevice(s->dev));
        CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        CHECK(cudaEventRecord(done, st));
        CHECK(cudaSetDevice(sides[0]->dev));
        CHECK(cudaStreamWaitEvent(sides[0]->user, done, 0));
        CHECK(cudaEventDestroy(done));
      }
    }
    CHECK(cudaEventRecord(stop, sides[0]->user));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    if (i >= 2) us.push_back(ms * 1000.0);  // two warm-ups
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void report(const char* what, size_t bytes, double us) {
  printf("%-12s %12zu bytes %10.2f us %8.1f GB/s\n", what, bytes, us, bytes / us / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t{16} << 20);
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (n < 2) {
    printf("needs 2 GPUs\n");
    return 77;
  }
  Side a, b;
  setup(&a, 0, 1, bytes);
  setup(&b, 1, 0, bytes);
  report("local", bytes, timeIt({&a}, iters, [&] {
           CHECK(cudaSetDevice(0));
           CHECK(cudaMemcpyAsync(a.stage, a.src, bytes, cudaMemcpyDeviceToDevice, a.user));
         }));
  report("peer", bytes, timeIt({&a}, iters, [&] {
           CHECK(cudaSetDevice(0));
           CHECK(cudaMemcpyAsync(a.dstOnPeer, a.stage, bytes, cudaMemcpyDefault, a.proxy));
         }));
  report("both", bytes, timeIt({&a}, iters, [&] {
           CHECK(cudaSetDevice(0));
           CHECK(cudaMemcpyAsync(a.stage2, a.src2, bytes, cudaMemcpyDeviceToDevice, a.user));
           CHECK(cudaMemcpyAsync(a.dstOnPeer, a.stage, bytes, cudaMemcpyDefault, a.proxy));
         }));
  report("peer2", bytes, timeIt({&a, &b}, iters, [&] {
           for (Side* s : {&a, &b}) {
             CHECK(cudaSetDevice(s->dev));
             CHECK(cudaMemcpyAsync(s->dstOnPeer, s->stage, bytes, cudaMemcpyDefault, s->proxy));
           }
         }));
  report("serial", bytes, timeIt({&a}, iters, [&] { serialSend(a, bytes); }));
  report("serial2", bytes, timeIt({&a, &b}, iters, [&] {
           serialSend(a, bytes);
           serialSend(b, bytes);
         }));
  for (int pieces : {1, 4, 8, 16}) {
    char name[32];
    snprintf(name, sizeof(name), "staged/%d", pieces);
    report(name, bytes, timeIt({&a}, iters, [&] { stagedSend(a, bytes, pieces); }));
    snprintf(name, sizeof(name), "staged2/%d", pieces);
    report(name, bytes, timeIt({&a, &b}, iters, [&] {
             stagedSend(a, bytes, pieces);
             stagedSend(b, bytes, pieces);
           }));
  }
  return 0;
}
