// ferry-net-turnaround: the GPU's share of a cross-host exchange's
// turnaround. Session 39's proxy trace of a 4 MiB sendrecv across two
// emulated hosts (bench/RESULTS.md) put 208-241 us (median) between a
// receive's last chunk landing and the next send's first chunk leaving.
// Between those two points Ferry's streams do, in order (enqueue/p2p_net.cc):
//   the receive's copy stream: a stream wait for `arrived` (host memory,
//   written by the proxy), the last chunk's copy into the user's buffer;
//   the user's stream: a wait for that copy (event), then the next launch's
//   start (event);
//   the send's copy stream: a wait for that start, the first chunk's copy
//   into pinned staging, a stream write of `filled` (host memory, which the
//   proxy polls).
// This probe replays exactly that on one GPU, every iteration queued ahead,
// with a host thread standing in for the proxy: it writes `arrived` and
// times until it sees `filled`. Variants drop the event hops (everything on
// one stream) or the copies, so the hops, the copies and the flag round
// trip each get a number; what the trace shows beyond the full chain's
// time is the proxy's and the socket engine's.
//
// Usage: ferry-net-turnaround [chunk bytes, default 1 MiB] [iters, default 200]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

namespace {

struct Variant {
  const char* name;
  bool oneStream;  // every operation on the user's stream: no event hops
  bool copies;     // the two chunk copies (else the flags and hops alone)
};

struct Rig {
  char* userSend = nullptr;            // device: the next send's bytes
  char* userRecv = nullptr;            // device: the receive's destination
  char* recvStage = nullptr;           // pinned: where the proxy landed the chunk
  char* sendStage = nullptr;           // pinned: where the send stages its chunk
  volatile uint64_t* words = nullptr;  // pinned, mapped: arrived, filled
  cudaStream_t recvCopy = nullptr, user = nullptr, sendCopy = nullptr;
  cudaEvent_t copied = nullptr, start = nullptr;
  uint64_t epoch = 0;  // flag values only grow
};

CUdeviceptr word(Rig& r, int i) {
  return reinterpret_cast<CUdeviceptr>(const_cast<uint64_t*>(&r.words[i]));
}

// One exchange's GPU work, waiting for arrived >= k and ending with filled = k.
void queueOne(Rig& r, const Variant& v, size_t bytes, uint64_t k) {
  cudaStream_t rc = v.oneStream ? r.user : r.recvCopy;
  cudaStream_t sc = v.oneStream ? r.user : r.sendCopy;
  CU_CHECK(
      cuStreamWaitValue64(reinterpret_cast<CUstream>(rc), word(r, 0), k, CU_STREAM_WAIT_VALUE_GEQ));
  if (v.copies) CHECK(cudaMemcpyAsync(r.userRecv, r.recvStage, bytes, cudaMemcpyHostToDevice, rc));
  if (!v.oneStream) {
    CHECK(cudaEventRecord(r.copied, rc));
    CHECK(cudaStreamWaitEvent(r.user, r.copied, 0));
    CHECK(cudaEventRecord(r.start, r.user));
    CHECK(cudaStreamWaitEvent(sc, r.start, 0));
  }
  if (v.copies) CHECK(cudaMemcpyAsync(r.sendStage, r.userSend, bytes, cudaMemcpyDeviceToHost, sc));
  // Ordered after the copy on the same stream: the host sees `filled` only
  // once the staged bytes are there.
  CU_CHECK(cuStreamWriteValue64(reinterpret_cast<CUstream>(sc), word(r, 1), k,
                                CU_STREAM_WRITE_VALUE_DEFAULT));
}

// Median and 90th percentile (us) of `iters` turnarounds after 20 warm-ups.
void run(Rig& r, const Variant& v, size_t bytes, int iters, double* median, double* p90) {
  constexpr int kWarm = 20;
  const uint64_t first = r.epoch + 1;
  for (int i = 0; i < kWarm + iters; ++i) queueOne(r, v, bytes, ++r.epoch);
  std::vector<double> us;
  for (uint64_t k = first; k <= r.epoch; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    // Release: the "landed" chunk's bytes (not written here) would come first.
    std::atomic_thread_fence(std::memory_order_release);
    r.words[0] = k;
    auto t1 = t0;
    while (r.words[1] < k) {
      t1 = std::chrono::steady_clock::now();
      if (t1 - t0 > std::chrono::seconds(5)) {
        fprintf(stderr, "ferry-net-turnaround: %s: no `filled` %llu after 5 s\n", v.name,
                static_cast<unsigned long long>(k));
        exit(1);
      }
    }
    t1 = std::chrono::steady_clock::now();
    if (k >= first + kWarm)
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  CHECK(cudaDeviceSynchronize());
  std::sort(us.begin(), us.end());
  *median = us[us.size() / 2];
  *p90 = us[us.size() * 9 / 10];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t{1} << 20);
  const int iters = argc > 2 ? atoi(argv[2]) : 200;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    printf("ferry-net-turnaround needs a GPU: skipped\n");
    return 77;
  }
  if (bytes == 0 || iters < 1) {
    fprintf(stderr, "ferry-net-turnaround: bytes and iters must be positive\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  Rig r;
  CHECK(cudaMalloc(&r.userSend, bytes));
  CHECK(cudaMalloc(&r.userRecv, bytes));
  CHECK(cudaMemset(r.userSend, 0x5a, bytes));
  CHECK(cudaHostAlloc(&r.recvStage, bytes, cudaHostAllocPortable));
  CHECK(cudaHostAlloc(&r.sendStage, bytes, cudaHostAllocPortable));
  void* w = nullptr;
  CHECK(cudaHostAlloc(&w, 2 * sizeof(uint64_t), cudaHostAllocPortable | cudaHostAllocMapped));
  r.words = static_cast<volatile uint64_t*>(w);
  r.words[0] = r.words[1] = 0;
  for (size_t i = 0; i < bytes; i += 4096) r.recvStage[i] = static_cast<char>(i >> 12);
  CHECK(cudaStreamCreateWithFlags(&r.recvCopy, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&r.user, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&r.sendCopy, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&r.copied, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&r.start, cudaEventDisableTiming));
  const Variant variants[] = {
      {"Ferry's chain: 3 streams, 2 event hops, both copies", false, true},
      {"one stream: no event hops, both copies", true, true},
      {"3 streams, 2 event hops, no copies", false, false},
      {"one stream, no copies: the flag round trip", true, false},
  };
  printf(
      "# %zu-byte chunk, %d iterations each (after 20 warm-ups); us from the host's "
      "`arrived` to its seeing `filled`\n",
      bytes, iters);
  printf("# %-56s %9s %9s\n", "chain", "median", "p90");
  for (int round = 0; round < 2; ++round) {  // twice: clocks settle in the first
    for (const Variant& v : variants) {
      double median = 0, p90 = 0;
      run(r, v, bytes, iters, &median, &p90);
      printf("  %-56s %9.1f %9.1f%s\n", v.name, median, p90, round == 0 ? "  (first round)" : "");
    }
  }
  return 0;
}
