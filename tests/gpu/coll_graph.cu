// CUDA graphs on 2 GPUs: a graph captured once holds [fill the input from a
// device iteration counter][all-reduce][send/recv with the peer][bump the
// counter]. Replayed many times, each replay must reduce and exchange that
// replay's fresh data. Collectives capture as kernels; the sends/receives
// inside the capture fall back from SM-free to kernel p2p (the proxy cannot
// take part in replays). Verified element-wise against exact references
// (integer-valued floats); outputs poisoned before every replay.
// FERRY_TEST_GRAPH_COLL_ONLY=1 captures the all-reduce alone (across hosts,
// send/recv is captured only with FERRY_P2P_KERNEL_ACROSS_HOSTS=1, whose
// kernel p2p lanes cross hosts through the proxy); ranks share GPUs when there are
// fewer than two (emulated hosts on one GPU). FERRY_TEST_GRAPH_FIRST=1
// makes the captured all-reduce the communicator's first collective (the
// salt travels over the bootstrap instead), captured in CUDA's global mode:
// the collective ring is then set up inside the capture
// (NCCL_RUNTIME_CONNECT=1), where CUDA refuses allocations unless relaxed.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "ferry.h"
#include "nccl.h"
#include "two_rank_main.h"

__device__ float valueOf(int rank, size_t j, int iter, unsigned salt) {
  return static_cast<float>((rank + 1) * static_cast<int>((j * 2654435761u + salt) % 1021) + iter);
}

__global__ void fill(float* in, size_t n, int rank, const int* iter, unsigned salt) {
  for (size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
    in[j] = valueOf(rank, j, *iter, salt);
}

__global__ void bump(int* iter) {
  ++*iter;
}

float hostValue(int rank, size_t j, int iter, unsigned salt) {
  return static_cast<float>((rank + 1) * static_cast<int>((j * 2654435761u + salt) % 1021) + iter);
}

int main() {
  const int rank = ferry::test::twoRankFromEnv();
  if (rank < 0) return 2;
  ferry::test::HangWatchdog watchdog(120, "hang");
  int ndev = 1;
  CHECK(cudaGetDeviceCount(&ndev));
  CHECK(cudaSetDevice(rank % ndev));
  const char* only = getenv("FERRY_TEST_GRAPH_COLL_ONLY");
  const bool collOnly = only != nullptr && only[0] == '1';
  const unsigned salt = static_cast<unsigned>(time(nullptr));  // fresh data every run
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, 2, id, rank));
  const char* firstEnv = getenv("FERRY_TEST_GRAPH_FIRST");
  const bool firstInCapture = firstEnv != nullptr && firstEnv[0] == '1';
  unsigned agreedSalt = 0;
  if (firstInCapture) {  // rank 0's salt for both, no collective before the capture
    unsigned salts[2] = {salt, salt};
    CHECK(ncclFerryBootstrapAllGather(comm, salts, sizeof(unsigned)));
    agreedSalt = salts[0];
  } else {  // rank 0's salt for both (exchanged through an all-reduce of max)
    unsigned* d;
    CHECK(cudaMalloc(&d, sizeof(unsigned)));
    unsigned mine = rank == 0 ? salt : 0;
    CHECK(cudaMemcpy(d, &mine, sizeof(mine), cudaMemcpyHostToDevice));
    CHECK(ncclAllReduce(d, d, 1, ncclUint32, ncclMax, comm, nullptr));
    CHECK(cudaMemcpy(&agreedSalt, d, sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
  }
  printf("rank %d: salt %u\n", rank, agreedSalt);
  const size_t n = (1 << 20) + 3;
  float *in, *sum, *got;
  int* iter;
  CHECK(cudaMalloc(&in, n * sizeof(float)));
  CHECK(cudaMalloc(&sum, n * sizeof(float)));
  CHECK(cudaMalloc(&got, n * sizeof(float)));
  CHECK(cudaMalloc(&iter, sizeof(int)));
  CHECK(cudaMemset(iter, 0, sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());
  const int peer = 1 - rank;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(
      s, firstInCapture ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal));
  fill<<<256, 256, 0, s>>>(in, n, rank, iter, agreedSalt);
  CHECK(ncclAllReduce(in, sum, n, ncclFloat, ncclSum, comm, s));
  if (!collOnly) {
    CHECK(ncclGroupStart());
    CHECK(ncclSend(in, n, ncclFloat, peer, comm, s));
    CHECK(ncclRecv(got, n, ncclFloat, peer, comm, s));
    CHECK(ncclGroupEnd());
  }
  bump<<<1, 1, 0, s>>>(iter);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<float> hSum(n), hGot(n);
  long failures = 0;
  const int kReplays = 25;
  for (int it = 0; it < kReplays; ++it) {
    CHECK(cudaMemsetAsync(sum, 0xff, n * sizeof(float), s));  // NaN poison
    CHECK(cudaMemsetAsync(got, 0xff, n * sizeof(float), s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(hSum.data(), sum, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(hGot.data(), got, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (size_t j = 0; j < n; ++j) {
      float wantSum = hostValue(0, j, it, agreedSalt) + hostValue(1, j, it, agreedSalt);
      float wantGot = hostValue(peer, j, it, agreedSalt);
      if (hSum[j] != wantSum || (!collOnly && hGot[j] != wantGot)) {
        if (++failures <= 5) {
          fprintf(stderr, "rank %d replay %d elt %zu: sum %g (want %g), recv %g (want %g)\n", rank,
                  it, j, hSum[j], wantSum, hGot[j], wantGot);
        }
      }
    }
  }
  printf("%s rank %d: %d graph replays of all-reduce%s, %ld wrong elements\n",
         failures == 0 ? "PASS" : "FAIL", rank, kReplays, collOnly ? "" : " + send/recv", failures);
  watchdog.stop();
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(ncclCommDestroy(comm));
  return failures == 0 ? 0 : 1;
}
