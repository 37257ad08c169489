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
  DEMO_CHECK(ncclCommDestroy(comm));
  printf("rank %d of %d done\n", rank, nranks);
  return 0;
}
