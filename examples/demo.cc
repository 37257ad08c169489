// Ferry demo: every rank (started by ferry-run) creates a communicator, prints
// the topology it found, all-gathers a value through the bootstrap network,
// checks it, meets the others at a barrier and destroys the communicator.
//
//   ferry-run -n 4 build/examples/ferry-demo
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ferry.h"
#include "nccl.h"

namespace {

int envInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != nullptr ? atoi(v) : fallback;
}

#define DEMO_CHECK(call)                                                     \
  do {                                                                       \
    ncclResult_t r_ = (call);                                                \
    if (r_ != ncclSuccess) {                                                 \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, ncclGetErrorString(r_), \
              ncclGetLastError(nullptr));                                    \
      return 1;                                                              \
    }                                                                        \
  } while (0)

}  // namespace

int main() {
  int rank = envInt("RANK", -1);
  int nranks = envInt("WORLD_SIZE", -1);
  if (rank < 0 || nranks < 1) {
    fprintf(stderr, "run me under ferry-run, e.g.: ferry-run -n 4 %s\n", "ferry-demo");
    return 2;
  }
  int ndev = 0;
  DEMO_CHECK(ncclFerryGetDeviceCount(&ndev));
  DEMO_CHECK(ncclFerrySetDevice(envInt("LOCAL_RANK", rank) % ndev));
  ncclFerryRuntime_t kind;
  DEMO_CHECK(ncclFerryGetRuntime(&kind));

  // With NCCL_COMM_ID set (ferry-run sets it) every rank derives the same id.
  ncclUniqueId id;
  DEMO_CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  DEMO_CHECK(ncclCommInitRank(&comm, nranks, id, rank));

  std::vector<char> text(4096);
  DEMO_CHECK(ncclFerryCommDescribe(comm, text.data(), text.size()));
  printf("%s runtime; %s\n", kind == ncclFerryRuntimeCuda ? "CUDA" : "host", text.data());

  std::vector<long> values(nranks, 0);
  values[rank] = 1000L * rank + 7;
  DEMO_CHECK(ncclFerryBootstrapAllGather(comm, values.data(), sizeof(long)));
  for (int r = 0; r < nranks; ++r) {
    if (values[r] != 1000L * r + 7) {
      fprintf(stderr, "all-gather slot %d holds %ld, expected %ld\n", r, values[r], 1000L * r + 7);
      return 1;
    }
  }
  printf("all-gather of %d values verified\n", nranks);
  DEMO_CHECK(ncclFerryBootstrapBarrier(comm));
  printf("barrier passed\n");

  // SM-free send/recv around the ring. On the host runtime buffers are host
  // memory the demo can fill and check directly; on CUDA, ferry-bench and the
  // GPU tests exercise the same path with device memory.
  if (kind == ncclFerryRuntimeHost) {
    const size_t count = (1 << 20) + 7;
    const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    std::vector<unsigned> out(count), in(count, 0xA5A5A5A5u);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<unsigned>(i * 2654435761u) ^ rank;
    DEMO_CHECK(ncclGroupStart());
    DEMO_CHECK(ncclSend(out.data(), count, ncclUint32, next, comm, nullptr));
    DEMO_CHECK(ncclRecv(in.data(), count, ncclUint32, prev, comm, nullptr));
    DEMO_CHECK(ncclGroupEnd());  // NULL stream on the host runtime: done on return
    for (size_t i = 0; i < count; ++i) {
      if (in[i] != (static_cast<unsigned>(i * 2654435761u) ^ prev)) {
        fprintf(stderr, "ring send/recv: element %zu from rank %d is wrong\n", i, prev);
        return 1;
      }
    }
    printf("SM-free ring send/recv of %zu values from rank %d verified\n", count, prev);

    // A ring all-reduce (the GPU kernels' schedule, run by the host
    // runtime's CPU executor): every rank contributes i + 1000 * rank.
    std::vector<double> mine(count), sum(count, -1.0);
    for (size_t i = 0; i < count; ++i) mine[i] = static_cast<double>(i) + 1000.0 * rank;
    DEMO_CHECK(ncclAllReduce(mine.data(), sum.data(), count, ncclFloat64, ncclSum, comm, nullptr));
    const double rankSum = 1000.0 * nranks * (nranks - 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      if (sum[i] != static_cast<double>(i) * nranks + rankSum) {
        fprintf(stderr, "all-reduce: element %zu is %g\n", i, sum[i]);
        return 1;
      }
    }
    printf("all-reduce of %zu doubles over %d ranks verified\n", count, nranks);
  }
  DEMO_CHECK(ncclCommDestroy(comm));
  printf("rank %d of %d done\n", rank, nranks);
  return 0;
}
