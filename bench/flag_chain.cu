// ferry-flag-chain: what the SM-free exchange's flag chain costs per message,
// by where the flags live and how a stream waits for one. Ferry's sendrecv at
// 4 MiB fits ~22 us + 2.87 us/MiB against NCCL's ~12 us + 4.8 us/MiB
// (bench/RESULTS.md session 23); each message crosses two flags: the
// receiver's `ready` (its stream reached the group) before the sender's
// push, and the sender's `done` after it. Ferry keeps both in host memory
// (the CPUs read them too) and waits with a one-thread spin kernel.
//
// Usage: ferry-flag-chain [bytes] [iters]   (one process, GPUs 0 and 1)
// Both GPUs exchange `bytes` per iteration, as two ranks in a GPU-bound
// loop: every iteration is queued before the first runs (the streams wait
// for a "go" word the host writes once all are queued), so the time is the
// GPUs' own. Per iteration and GPU g: its user stream writes ready[g]; its
// copy stream waits for that (event), waits for ready of the other GPU,
// pushes into the other GPU, writes done[g]; the user stream waits for the
// copy (event) and for the other GPU's done. Variants: flags in pinned host
// memory or in the waiting GPU's memory (written by the other GPU across
// NVLink), waits by spin kernel or by cuStreamWaitValue64; "bare" is the
// pushes alone (no flags, no waits); "inline" pushes on the user stream
// (no copy stream, no events); "no ready wait" skips the wait for the
// receiver (unsafe: it shows what that hop costs). Each line: variant, us per iteration
// with the message, and with no bytes (the chain alone).
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cuda_check.h"

namespace {

__global__ void spinUntil(const volatile uint64_t* word, uint64_t value) {
  while (*word < value) {
  }
}

struct Variant {
  const char* name;
  bool deviceFlags;  // flags in the waiting GPU's memory
  bool memop;        // cuStreamWaitValue64 instead of a spin kernel
  bool bare;         // pushes only
  bool inlineCopy;   // the push on the user stream (no copy stream, no events)
  bool noReady;      // no wait for the receiver's ready (unsafe: a lower bound)
};

struct Rig {
  char* src[2] = {};
  char* dst[2] = {};
  cudaStream_t user[2] = {}, copy[2] = {};
  uint64_t* host = nullptr;  // pinned: go, ready[2], done[2]
  uint64_t* dev[2] = {};     // on GPU g: ready of the other GPU, done of the other GPU
  uint64_t epoch = 0;        // flag values only grow
};

bool drv(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* msg = nullptr;
  cuGetErrorString(r, &msg);
  fprintf(stderr, "%s: %s\n", what, msg ? msg : "?");
  return false;
}

void setup(Rig* r, size_t bytes) {
  CHECK(cudaHostAlloc(&r->host, 8 * sizeof(uint64_t), cudaHostAllocPortable | cudaHostAllocMapped));
  memset(r->host, 0, 8 * sizeof(uint64_t));
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CHECK(cudaMalloc(&r->src[g], bytes + 1));
    CHECK(cudaMalloc(&r->dst[g], bytes + 1));
    CHECK(cudaMemset(r->src[g], g + 1, bytes + 1));
    CHECK(cudaMalloc(&r->dev[g], 2 * sizeof(uint64_t)));
    CHECK(cudaMemset(r->dev[g], 0, 2 * sizeof(uint64_t)));
    CHECK(cudaStreamCreateWithFlags(&r->user[g], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&r->copy[g], cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
  }
}

// Where GPU g's flag of `kind` (0 ready, 1 done) lives: host memory, or the
// memory of the GPU that waits for it (the other one).
uint64_t* flag(Rig& r, const Variant& v, int g, int kind) {
  return v.deviceFlags ? &r.dev[1 - g][kind] : &r.host[1 + 2 * kind + g];
}

bool waitFor(cudaStream_t s, const Variant& v, uint64_t* word, uint64_t value) {
  if (v.memop) {
    return drv(
        cuStreamWaitValue64(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word),
                            value, CU_STREAM_WAIT_VALUE_GEQ),
        "cuStreamWaitValue64");
  }
  spinUntil<<<1, 1, 0, s>>>(word, value);
  return cudaGetLastError() == cudaSuccess;
}

bool write(cudaStream_t s, uint64_t* word, uint64_t value) {
  return drv(
      cuStreamWriteValue64(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word),
                           value, CU_STREAM_WRITE_VALUE_DEFAULT),
      "cuStreamWriteValue64");
}

bool queueIteration(Rig& r, const Variant& v, size_t bytes, cudaEvent_t ev[2][2]) {
  const uint64_t k = ++r.epoch;
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    if (v.bare) {
      if (bytes > 0)
        CHECK(cudaMemcpyAsync(r.dst[1 - g], r.src[g], bytes, cudaMemcpyDeviceToDevice, r.copy[g]));
      continue;
    }
    cudaStream_t c = v.inlineCopy ? r.user[g] : r.copy[g];
    if (!write(r.user[g], flag(r, v, g, 0), k)) return false;
    if (!v.inlineCopy) {
      CHECK(cudaEventRecord(ev[g][0], r.user[g]));
      CHECK(cudaStreamWaitEvent(c, ev[g][0], 0));
    }
    if (!v.noReady && !waitFor(c, v, flag(r, v, 1 - g, 0), k)) return false;
    if (bytes > 0)
      CHECK(cudaMemcpyAsync(r.dst[1 - g], r.src[g], bytes, cudaMemcpyDeviceToDevice, c));
    if (!write(c, flag(r, v, g, 1), k)) return false;
    if (!v.inlineCopy) {
      CHECK(cudaEventRecord(ev[g][1], c));
      CHECK(cudaStreamWaitEvent(r.user[g], ev[g][1], 0));
    }
    if (!waitFor(r.user[g], v, flag(r, v, 1 - g, 1), k)) return false;
  }
  return true;
}

// Parks both GPUs' streams on the host word `go` until every timed iteration
// is queued. A queue too full to take them all would block the CPU before
// it opens the gate: a watchdog opens it after 5 s, and the run says so.
struct Gate {
  explicit Gate(Rig& r) : rig(r), go(r.host[0] + 1) {}
  void park(cudaStream_t s) {
    if (!drv(cuStreamWaitValue64(reinterpret_cast<CUstream>(s),
                                 reinterpret_cast<CUdeviceptr>(&rig.host[0]), go,
                                 CU_STREAM_WAIT_VALUE_GEQ),
             "gate")) {
      exit(1);
    }
  }
  void open() {
    // Release store to a pinned word the GPUs poll: the queued work before
    // it is already submitted; nothing else orders with it.
    reinterpret_cast<std::atomic<uint64_t>*>(&rig.host[0])->store(go, std::memory_order_release);
  }
  Rig& rig;
  const uint64_t go;
};

// us per iteration (the slower GPU's user stream from the gate to the end).
double run(Rig& r, const Variant& v, size_t bytes, int iters) {
  cudaEvent_t ev[2][2], t0[2], t1[2];
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    for (auto& e : ev[g]) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&t0[g]));
    CHECK(cudaEventCreate(&t1[g]));
  }
  for (int i = 0; i < 10; ++i) {  // warm up
    if (!queueIteration(r, v, bytes, ev)) exit(1);
  }
  Gate gate(r);
  std::atomic<bool> queued{false}, forced{false};
  std::thread watchdog([&] {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!queued.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!queued.load()) {
      forced = true;
      gate.open();
    }
  });
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    gate.park(r.user[g]);
    gate.park(r.copy[g]);
    CHECK(cudaEventRecord(t0[g], v.bare ? r.copy[g] : r.user[g]));
  }
  for (int i = 0; i < iters; ++i) {
    if (!queueIteration(r, v, bytes, ev)) exit(1);
  }
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaEventRecord(t1[g], v.bare ? r.copy[g] : r.user[g]));
  }
  queued = true;
  gate.open();
  watchdog.join();
  float ms[2] = {};
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventElapsedTime(&ms[g], t0[g], t1[g]));
    for (auto& e : ev[g]) CHECK(cudaEventDestroy(e));
    CHECK(cudaEventDestroy(t0[g]));
    CHECK(cudaEventDestroy(t1[g]));
  }
  if (forced) printf("  (the queue filled before the gate opened: CPU-bound, fewer iterations)\n");
  return 1000.0 * (ms[0] > ms[1] ? ms[0] : ms[1]) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t{4} << 20);
  const int iters = argc > 2 ? atoi(argv[2]) : 50;
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    printf("ferry-flag-chain: skipped (needs 2 GPUs, found %d)\n", n);
    return 0;
  }
  Rig r;
  setup(&r, bytes);
  const Variant variants[] = {
      {"bare pushes", false, false, true, false, false},
      {"host flags, spin kernel", false, false, false, false, false},
      {"host flags, memop wait", false, true, false, false, false},
      {"device flags, spin kernel", true, false, false, false, false},
      {"device flags, memop wait", true, true, false, false, false},
      {"device flags, spin, inline", true, false, false, true, false},
      {"device, spin, no ready wait", true, false, false, false, true},
  };

  printf("ferry-flag-chain: %zu bytes each way, %d iterations\n", bytes, iters);
  for (int round = 0; round < 2; ++round) {
    for (const Variant& v : variants) {
      double with = run(r, v, bytes, iters);
      double chain = run(r, v, 0, iters);
      printf("%-28s %8.2f us  (no bytes: %6.2f us)\n", v.name, with, chain);
      fflush(stdout);
    }
  }
  return 0;
}
