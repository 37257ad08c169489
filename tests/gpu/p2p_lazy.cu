// The lazy-module-loading hazard (DESIGN.md), reproduced as the issue states
// it, on 2 GPUs: each rank posts a send that cannot complete until the peer
// posts its receive, then launches a kernel never launched before in the
// process, then posts its receive. Under CUDA_MODULE_LOADING=LAZY, a user
// stream blocked in a host-word wait would stall that first launch (and the
// program) forever; Ferry must complete. A watchdog turns a hang into a
// failure after 60 s.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "ferry.h"
#include "nccl.h"
#include "two_rank_main.h"

__global__ void neverLaunchedBefore(float* data, int n, float add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 2.0f + add;
}

int main() {
  const int rank = ferry::test::twoRankFromEnv();
  if (rank < 0) return 2;
  ferry::test::HangWatchdog watchdog(30, "hang (lazy loading deadlock?)");
  CHECK(cudaSetDevice(rank));
  const char* mode = getenv("CUDA_MODULE_LOADING");
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, 2, id, rank));
  const size_t n = 64 << 20;  // 256 MiB of floats: far more than any FIFO
  float *send, *recv, *work;
  CHECK(cudaMalloc(&send, n * sizeof(float)));
  CHECK(cudaMalloc(&recv, n * sizeof(float)));
  CHECK(cudaMalloc(&work, 1024 * sizeof(float)));
  CHECK(cudaMemset(send, rank + 1, n * sizeof(float)));
  CHECK(cudaMemset(recv, 0, n * sizeof(float)));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());
  int peer = 1 - rank;
  auto start = std::chrono::steady_clock::now();
  CHECK(ncclSend(send, n, ncclFloat, peer, comm, s1));  // cannot finish yet
  fprintf(stderr, "rank %d: send posted\n", rank);
  neverLaunchedBefore<<<4, 256, 0, s2>>>(work, 1024, 1.0f);  // first launch: lazy load
  CHECK(cudaGetLastError());
  fprintf(stderr, "rank %d: new kernel launched\n", rank);
  CHECK(ncclRecv(recv, n, ncclFloat, peer, comm, s2));
  fprintf(stderr, "rank %d: recv posted\n", rank);
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamSynchronize(s2));
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  unsigned char b = 0;
  CHECK(cudaMemcpy(&b, reinterpret_cast<char*>(recv) + n * sizeof(float) - 1, 1,
                   cudaMemcpyDeviceToHost));
  bool ok = b == static_cast<unsigned char>(peer + 1);
  printf("%s rank %d: CUDA_MODULE_LOADING=%s FERRY_USER_WAIT=%s: completed in %.1f ms, data %s\n",
         ok ? "PASS" : "FAIL", rank, mode ? mode : "(default)",
         getenv("FERRY_USER_WAIT") ? getenv("FERRY_USER_WAIT") : "auto", ms, ok ? "ok" : "WRONG");
  watchdog.stop();
  CHECK(ncclCommDestroy(comm));
  return ok ? 0 : 1;
}
