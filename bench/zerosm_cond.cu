// ferry-zerosm-cond: under which conditions does a stream parked in
// cuStreamWaitValue64 keep kernels on OTHER streams of the process from
// running? shared/probes/zerosm.cu saw them run (pinned host word or device
// word, non-blocking streams); NOTES.md trap 16 saw them stall (a word in a
// memfd control block registered with cudaHostRegister). This probe varies
// one condition at a time, each case in its own child process (a stall
// cannot take the other cases with it):
//   mem     hostalloc (cudaHostAlloc, mapped) | malloc (malloc +
//           cudaHostRegister) | memfd (shared memfd mapping + cudaHostRegister,
//           as Ferry's control blocks) | device (cudaMalloc)
//   waiter  the waiting stream: nonblocking | blocking (created without
//           cudaStreamNonBlocking) | legacy (the NULL stream)
//   other   the stream of the kernel that should run: nonblocking | blocking
//   waits   how many streams are parked at once (1 or 4)
// Run it under CUDA_MODULE_LOADING=EAGER/LAZY and CUDA_DEVICE_MAX_CONNECTIONS
// values; each line: the case, "ran" or "STALLED" for an already-loaded
// kernel, and the same for the first launch of a kernel never launched
// before (under lazy loading, a load).
// Usage: ferry-zerosm-cond [filter]   (one GPU; substring filter on case names)
//        ferry-zerosm-cond alias [streams]   (see runAlias)
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                               \
  do {                                                                      \
    cudaError_t e_ = (x);                                                   \
    if (e_ != cudaSuccess) {                                                \
      printf("ERR %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      _exit(3);                                                             \
    }                                                                       \
  } while (0)
#define CU(x)                                                        \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                        \
      const char* s_ = nullptr;                                      \
      cuGetErrorString(r_, &s_);                                     \
      printf("CUERR %s:%d %s\n", __FILE__, __LINE__, s_ ? s_ : "?"); \
      _exit(3);                                                      \
    }                                                                \
  } while (0)

namespace {

__global__ void mark(volatile unsigned long long* f, unsigned long long v) {
  *f = v;
}
__global__ void spinUntil(volatile unsigned long long* f, unsigned long long v) {
  while (*f < v) {
  }
}
__global__ void freshKernel(volatile unsigned long long* f, unsigned long long v) {
  *f = v;
}

struct Case {
  std::string mem, waiter, other;
  int waits;
  std::string name() const {
    return mem + "/" + waiter + "/" + other + "/w" + std::to_string(waits);
  }
};

bool waitFor(volatile unsigned long long* p, unsigned long long v, double limitMs) {
  auto t0 = std::chrono::steady_clock::now();
  while (*p != v) {
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
    if (ms.count() > limitMs) return false;
  }
  return true;
}

// The awaited word (device address) and how the host releases it.
unsigned long long* makeWord(const std::string& mem, volatile unsigned long long** hostView) {
  void* host = nullptr;
  if (mem == "hostalloc") {
    CK(cudaHostAlloc(&host, 4096, cudaHostAllocMapped));
  } else if (mem == "malloc") {
    host = aligned_alloc(4096, 4096);
    CK(cudaHostRegister(host, 4096, cudaHostRegisterPortable | cudaHostRegisterMapped));
  } else if (mem == "memfd") {
    int fd = memfd_create("zerosm", 0);
    if (fd < 0 || ftruncate(fd, 4096) != 0) _exit(3);
    host = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (host == MAP_FAILED) _exit(3);
    CK(cudaHostRegister(host, 4096, cudaHostRegisterPortable | cudaHostRegisterMapped));
  } else {  // device: released by a write-value on a stream of its own
    unsigned long long* d = nullptr;
    CK(cudaMalloc(&d, 4096));
    CK(cudaMemset(d, 0, 4096));
    CK(cudaDeviceSynchronize());
    *hostView = nullptr;
    return d;
  }
  memset(host, 0, 4096);
  *hostView = static_cast<volatile unsigned long long*>(host);
  unsigned long long* dev = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
  return dev;
}

cudaStream_t makeStream(const std::string& kind) {
  if (kind == "legacy") return nullptr;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s,
                               kind == "nonblocking" ? cudaStreamNonBlocking : cudaStreamDefault));
  return s;
}

// The child: parks `waits` streams, then launches a loaded kernel and a new
// one on the other stream; prints what ran; releases; exits 0 if all done.
int runCase(const Case& c) {
  alarm(10);
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  unsigned long long* flags = nullptr;  // results, pinned: [1] loaded, [2] fresh, [3+i] waiters
  CK(cudaHostAlloc(&flags, 4096, cudaHostAllocMapped));
  memset(flags, 0, 4096);
  volatile unsigned long long* vf = flags;
  unsigned long long* df = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&df), flags, 0));
  volatile unsigned long long* hostWord = nullptr;
  unsigned long long* word = makeWord(c.mem, &hostWord);
  cudaStream_t other = makeStream(c.other);
  cudaStream_t releaser = makeStream("nonblocking");
  mark<<<1, 1, 0, other>>>(df + 1, 1);  // loads `mark`
  CK(cudaDeviceSynchronize());
  std::vector<cudaStream_t> waiters;
  for (int i = 0; i < c.waits; ++i) {
    cudaStream_t w = (i == 0) ? makeStream(c.waiter) : makeStream("nonblocking");
    waiters.push_back(w);
    CU(cuStreamWaitValue64(reinterpret_cast<CUstream>(w), reinterpret_cast<CUdeviceptr>(word), 1,
                           CU_STREAM_WAIT_VALUE_GEQ));
    mark<<<1, 1, 0, w>>>(df + 3 + i, 1);
  }
  usleep(20000);
  mark<<<1, 1, 0, other>>>(df + 1, 2);
  bool loaded = waitFor(vf + 1, 2, 150);
  // A first launch may itself block (a lazy load waits for the parked
  // streams): a thread releases the word after 400 ms, so a launch call
  // that takes ~400 ms was blocked until the release.
  std::thread release([&] {
    usleep(400000);
    if (hostWord != nullptr) {
      *hostWord = 1;
    } else {
      CU(cuStreamWriteValue64(reinterpret_cast<CUstream>(releaser),
                              reinterpret_cast<CUdeviceptr>(word), 1, 0));
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  freshKernel<<<1, 1, 0, other>>>(df + 2, 1);
  double callMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  bool fresh = waitFor(vf + 2, 1, 150) && vf[3] == 0;  // ran while the wait was still pending
  printf("%-40s loaded kernel: %-7s first launch: %-7s (call %.0f ms)", c.name().c_str(),
         loaded ? "ran" : "STALLED", fresh ? "ran" : "STALLED", callMs);
  release.join();
  bool released = true;
  for (int i = 0; i < c.waits; ++i) released = released && waitFor(vf + 3 + i, 1, 2000);
  printf(" release: %s\n", released ? "ok" : "NEVER");
  fflush(stdout);
  return released ? 0 : 1;
}

// "alias": one non-blocking stream parked on a host word, then kernels on
// `count` more non-blocking streams created afterwards: which of them stall?
// (Streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues.)
int runAlias(int count) {
  alarm(60);
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  unsigned long long* flags = nullptr;
  CK(cudaHostAlloc(&flags, 4096, cudaHostAllocMapped));
  memset(flags, 0, 4096);
  volatile unsigned long long* vf = flags;
  unsigned long long* df = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&df), flags, 0));
  cudaStream_t parked = makeStream("nonblocking");
  mark<<<1, 1, 0, parked>>>(df + 1, 1);  // loads `mark`
  CK(cudaDeviceSynchronize());
  // pre: the other streams exist before the wait parks (a stream created
  // while a wait is pending is the "post" variant).
  const bool pre = getenv("ALIAS_PRE") != nullptr;
  std::vector<cudaStream_t> others;
  for (int i = 0; pre && i < count; ++i) others.push_back(makeStream("nonblocking"));
  // ALIAS_SPIN: the stream is held by a running one-thread spin kernel
  // instead of a wait-value (what Ferry's user waits use).
  const bool spin = getenv("ALIAS_SPIN") != nullptr;
  spinUntil<<<1, 1, 0, parked>>>(df, 0);  // loads it
  CK(cudaDeviceSynchronize());
  if (spin) {
    spinUntil<<<1, 1, 0, parked>>>(df, 1);
  } else {
    CU(cuStreamWaitValue64(reinterpret_cast<CUstream>(parked), reinterpret_cast<CUdeviceptr>(df), 1,
                           CU_STREAM_WAIT_VALUE_GEQ));
  }
  printf("alias (%s, %s): parked\n", pre ? "streams made before" : "streams made after",
         spin ? "spin kernel" : "wait-value");
  for (int i = 0; i < count; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!pre) others.push_back(makeStream("nonblocking"));
    double makeMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    mark<<<1, 1, 0, others[i]>>>(df + 8 + i, 1);
    if (makeMs > 5 || i < 3) printf("stream %d made in %.1f ms\n", i + 1, makeMs);
  }
  usleep(200000);
  std::string stalled;
  int n = 0;
  for (int i = 0; i < count; ++i) {
    if (vf[8 + i] == 0) {
      stalled += " " + std::to_string(i + 1);
      ++n;
    }
  }
  printf("alias: %d of %d streams created after the parked one stalled:%s\n", n, count,
         stalled.c_str());
  *vf = 1;
  CK(cudaDeviceSynchronize());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc > 1 && strcmp(argv[1], "alias") == 0) {
    return runAlias(argc > 2 ? atoi(argv[2]) : 40);
  }
  const char* filter = argc > 1 ? argv[1] : "";
  const char* loading = getenv("CUDA_MODULE_LOADING");
  const char* conns = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("# ferry-zerosm-cond: CUDA_MODULE_LOADING=%s CUDA_DEVICE_MAX_CONNECTIONS=%s\n",
         loading ? loading : "(default)", conns ? conns : "(default)");
  std::vector<Case> cases;
  // One condition changed at a time from nonblocking/nonblocking/1 wait.
  for (const char* mem : {"hostalloc", "malloc", "memfd", "device"}) {
    cases.push_back({mem, "nonblocking", "nonblocking", 1});
    cases.push_back({mem, "nonblocking", "nonblocking", 4});
    cases.push_back({mem, "blocking", "nonblocking", 1});
    cases.push_back({mem, "legacy", "nonblocking", 1});
    cases.push_back({mem, "nonblocking", "blocking", 1});
    cases.push_back({mem, "legacy", "blocking", 1});
  }
  for (const Case& c : cases) {
    if (c.name().find(filter) == std::string::npos) continue;
    pid_t pid = fork();
    if (pid == 0) _exit(runCase(c));
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
      printf("%-40s HUNG (killed by signal %d)\n", c.name().c_str(), WTERMSIG(status));
  }
  return 0;
}
