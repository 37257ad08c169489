// Splits the cost of a small all-reduce (or a grouped send + receive between
// ring neighbours, --op sendrecv) into host submission and GPU time, for any
// libnccl.so.2 (Ferry's or NVIDIA's) loaded with dlopen, so both are
// measured by the same code in the same run:
//
//   ferry-run -n 2 build/bench/ferry-launch-cost --lib build/libnccl.so.2 [--bytes 8]
//       [--op allreduce|sendrecv]
//
// Rank 0 prints, per operation of `bytes` (float):
//   submit   host time of one ncclAllReduce call, back to back (no sync);
//   stream   GPU time per op of 200 back-to-back ops (what ferry-bench sees);
//   single   GPU time of one op launched onto an idle stream (event to event).
// Benchmark only: results are timings, not checked values.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ferry_bench/nccl_lib.h"

namespace {

int envInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != nullptr ? atoi(v) : fallback;
}

// GPU milliseconds between two events recorded around `body` on `s`.
template <class Body>
float timeOnStream(cudaStream_t s, Body body) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  body();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = nullptr;
  const char* opName = "allreduce";
  size_t bytes = 8;
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], "--lib") == 0) path = argv[i + 1];
    if (strcmp(argv[i], "--bytes") == 0) bytes = strtoull(argv[i + 1], nullptr, 10);
    if (strcmp(argv[i], "--op") == 0) opName = argv[i + 1];
  }
  const bool sendrecv = strcmp(opName, "sendrecv") == 0;
  const int rank = envInt("RANK", -1), nranks = envInt("WORLD_SIZE", -1);
  if (path == nullptr || rank < 0 || nranks < 1 || bytes < 4) {
    fprintf(stderr, "usage: ferry-run -n N %s --lib LIBNCCL [--bytes B]\n", argv[0]);
    return 2;
  }
  ferry::bench::NcclLib lib;
  std::string error;
  if (!ferry::bench::loadNcclLib(path, &lib, &error)) {
    fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (cudaSetDevice(envInt("FERRY_DEVICE", rank)) != cudaSuccess) return 1;
  const size_t count = bytes / sizeof(float);
  float* buf = nullptr;
  float* out = nullptr;
  cudaStream_t s = nullptr;
  if (cudaMalloc(&buf, count * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&out, count * sizeof(float)) != cudaSuccess ||
      cudaMemset(buf, 0, count * sizeof(float)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    return 1;
  }
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (lib.getUniqueId(&id) != ncclSuccess ||
      lib.commInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "init failed\n");
    return 1;
  }
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  auto op = [&] {
    if (!sendrecv) return lib.allReduce(buf, buf, count, ncclFloat, ncclSum, comm, s);
    lib.groupStart();
    lib.send(buf, count, ncclFloat, next, comm, s);
    lib.recv(out, count, ncclFloat, prev, comm, s);
    return lib.groupEnd();
  };
  constexpr int kOps = 200;
  for (int i = 0; i < 50; ++i) op();  // warm up
  cudaStreamSynchronize(s);
  // Host submission: the stream queue holds far more than kOps launches.
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kOps; ++i) op();
  const double submitUs =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      kOps;
  cudaStreamSynchronize(s);
  const float streamMs = timeOnStream(s, [&] {
    for (int i = 0; i < kOps; ++i) op();
  });
  double singleUs = 0;
  constexpr int kSingles = 50;
  for (int i = 0; i < kSingles; ++i) singleUs += 1000.0 * timeOnStream(s, op) / kSingles;
  if (rank == 0) {
    printf("%s: %zu B %s: submit %.2f us, stream %.2f us/op, single %.2f us\n", path, bytes,
           sendrecv ? "sendrecv" : "all-reduce", submitUs, 1000.0 * streamMs / kOps, singleUs);
  }
  lib.commDestroy(comm);
  return 0;
}
