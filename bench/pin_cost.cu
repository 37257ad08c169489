// ferry-pin-cost: what pinning a staging block costs the thread that pins it.
// Point-to-point across hosts stages a message in a pinned host block of a
// size class (transport/net_buffers.cc) and pins a new one, inside the
// user's call, whenever none is free: in torch's uneven all_to_all on 8
// emulated hosts (session 48) every call that pinned a 192 MiB block took
// 80-240 ms of CPU against ~1 ms for the others. This times, per size, the
// ways to get pinned, device-mapped host memory, and freeing it again:
//   hostalloc   cudaHostAlloc(Mapped | Portable)         (what Ferry does)
//   register    mmap + first touch + cudaHostRegister    (4 KiB pages)
//   thp         the same with madvise(MADV_HUGEPAGE)     (2 MiB pages)
// and, to show the memory works as well, a device -> host copy into it.
//
// Usage: ferry-pin-cost [MiB ...]   (default 16 64 192)
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.h"

namespace {

double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

struct Pinned {
  void* p = nullptr;
  size_t bytes = 0;
  bool mapped = false;  // mmap + register (else cudaHostAlloc)
};

Pinned pin(const std::string& how, size_t bytes) {
  Pinned out;
  out.bytes = bytes;
  if (how == "hostalloc") {
    CHECK(cudaHostAlloc(&out.p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    return out;
  }
  out.mapped = true;
  out.p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (out.p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  if (how == "thp" && madvise(out.p, bytes, MADV_HUGEPAGE) != 0) perror("madvise");
  memset(out.p, 1, bytes);  // first touch: the pages exist before the driver pins them
  CHECK(cudaHostRegister(out.p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  return out;
}

void unpin(Pinned& m) {
  if (!m.mapped) {
    CHECK(cudaFreeHost(m.p));
    return;
  }
  CHECK(cudaHostUnregister(m.p));
  munmap(m.p, m.bytes);
}

// AnonHugePages of this process, from /proc/self/smaps_rollup (kB).
long anonHugeKb() {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f) != nullptr) {
    if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
  }
  fclose(f);
  return kb;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> mibs;
  for (int i = 1; i < argc; ++i) mibs.push_back(strtoull(argv[i], nullptr, 10));
  if (mibs.empty()) mibs = {16, 64, 192};
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // the context, outside the timings
  FILE* thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char mode[128] = "?";
  if (thp != nullptr && fgets(mode, sizeof mode, thp) == nullptr) strcpy(mode, "?");
  if (thp != nullptr) fclose(thp);
  printf("transparent_hugepage: %s", mode);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (size_t mib : mibs) {
    const size_t bytes = mib << 20;
    void* dev = nullptr;
    CHECK(cudaMalloc(&dev, bytes));
    CHECK(cudaMemset(dev, 3, bytes));
    for (const char* how : {"hostalloc", "register", "thp"}) {
      for (int round = 0; round < 3; ++round) {
        double t0 = nowMs();
        Pinned m = pin(how, bytes);
        double t1 = nowMs();
        long huge = anonHugeKb();
        CHECK(cudaMemcpyAsync(m.p, dev, bytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        double t2 = nowMs();
        bool good = static_cast<unsigned char*>(m.p)[bytes - 1] == 3;
        unpin(m);
        double t3 = nowMs();
        printf(
            "%5zu MiB %-9s round %d: pin %8.2f ms (%6.2f GB/s)  d2h %6.2f GB/s  free %7.2f ms"
            "  AnonHugePages %ld kB%s\n",
            mib, how, round, t1 - t0, bytes / (t1 - t0) / 1e6, bytes / (t2 - t1) / 1e6, t3 - t2,
            huge, good ? "" : "  WRONG DATA");
      }
    }
    CHECK(cudaFree(dev));
  }
  CHECK(cudaStreamDestroy(s));
  return 0;
}
