// Probe: what a module or kernel load does while a stream wait is pending,
// and whether GPU work that ANOTHER thread submits meanwhile still runs.
//
// The question behind it: Ferry's proxy thread submits copies and
// write-values long after a user stream started waiting for them. If a load
// on the user's thread holds the context until every pending wait is
// released, and the proxy's submissions cannot run meanwhile, any pending
// wait that a later proxy submission releases deadlocks the process.
//
// Usage: ferry-load-sync WAIT ACTION RELEASE
//   WAIT:    spin      one-thread kernel polling a word in pinned host memory
//            memop     cuStreamWaitValue64 on a device word
//   ACTION:  launch    first launch of a kernel never launched before
//            modload   cuModuleLoadData of a small PTX module
//            malloc    cudaMalloc of 64 MiB
//   RELEASE: host      a helper thread stores the word from the CPU (spin) or
//                      with a synchronous cuMemcpyHtoD (memop) after 300 ms
//            copy      a helper thread submits a 1 MiB copy and a write-value
//                      on a third stream after 300 ms
// Prints one line: how long the action's call took, whether the helper's
// submissions returned, and whether the waiter was released. A watchdog ends
// the process after 4 s ("STUCK").
#include <cuda.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cuda_check.h"

#define CU(call)                                                        \
  do {                                                                  \
    CUresult r_ = (call);                                               \
    if (r_ != CUDA_SUCCESS) {                                           \
      const char* s_ = nullptr;                                         \
      cuGetErrorString(r_, &s_);                                        \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, s_); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

using Clock = std::chrono::steady_clock;

__global__ void spinWait(const volatile unsigned long long* w, unsigned long long v) {
  while (*w < v) __nanosleep(1000);
}
__global__ void setFlag(volatile unsigned long long* f, unsigned long long v) {
  *f = v;
}
__global__ void neverLaunched(volatile unsigned long long* f, unsigned long long v) {
  *f = v;
}

namespace {

const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry tiny(.param .u64 p) { ret; }\n";

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Polls a host-visible flag until it equals v or limitMs passes.
bool waitHost(volatile unsigned long long* p, unsigned long long v, double limitMs) {
  auto t0 = Clock::now();
  while (*p != v) {
    if (msSince(t0) > limitMs) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc != 4) {
    fprintf(stderr, "usage: %s spin|memop launch|modload|malloc host|copy\n", argv[0]);
    return 2;
  }
  const bool memop = !strcmp(argv[1], "memop");
  const char* action = argv[2];
  const bool copyRelease = !strcmp(argv[3], "copy");
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  CUmoduleLoadingMode mode;
  CU(cuModuleGetLoadingMode(&mode));
  printf("[%s] wait=%s action=%s release=%s: ", mode == CU_MODULE_LAZY_LOADING ? "LAZY" : "EAGER",
         argv[1], action, argv[3]);
  std::thread([] {
    sleep(4);
    printf("STUCK (watchdog after 4 s)\n");
    _exit(3);
  }).detach();

  unsigned long long* host = nullptr;  // [0] awaited word (spin), [1] marker
  CHECK(cudaHostAlloc(&host, 4096, cudaHostAllocMapped));
  memset(host, 0, 4096);
  unsigned long long* hostDev = nullptr;
  CHECK(cudaHostGetDevicePointer(&hostDev, host, 0));
  unsigned long long* devWord = nullptr;
  CHECK(cudaMalloc(&devWord, 64));
  CHECK(cudaMemset(devWord, 0, 64));
  char *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, 1 << 20));
  CHECK(cudaMalloc(&dst, 1 << 20));
  cudaStream_t waiter, other, releaser;
  CHECK(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&releaser, cudaStreamNonBlocking));
  // Load what the wait and the release use, as Ferry preloads its kernels.
  spinWait<<<1, 1, 0, waiter>>>(hostDev, 0);
  setFlag<<<1, 1, 0, waiter>>>(hostDev + 1, 0);
  CHECK(cudaDeviceSynchronize());

  // The pending wait, then a marker kernel that runs once it is released.
  if (memop) {
    CU(cuStreamWaitValue64(reinterpret_cast<CUstream>(waiter),
                           reinterpret_cast<CUdeviceptr>(devWord), 1, CU_STREAM_WAIT_VALUE_GEQ));
  } else {
    spinWait<<<1, 1, 0, waiter>>>(hostDev, 1);
  }
  setFlag<<<1, 1, 0, waiter>>>(hostDev + 1, 7);
  CHECK(cudaGetLastError());
  usleep(20000);

  std::atomic<double> submitMs{-1};
  std::thread helper([&] {
    usleep(300000);
    auto t = Clock::now();
    if (copyRelease) {
      CHECK(cudaMemcpyAsync(dst, src, 1 << 20, cudaMemcpyDeviceToDevice, releaser));
      CUdeviceptr word = reinterpret_cast<CUdeviceptr>(memop ? devWord : hostDev);
      CU(cuStreamWriteValue64(reinterpret_cast<CUstream>(releaser), word, 1, 0));
    } else if (memop) {
      unsigned long long one = 1;
      CU(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(devWord), &one, sizeof(one)));
    } else {
      *reinterpret_cast<volatile unsigned long long*>(host) = 1;  // the CPU release
    }
    submitMs = msSince(t);
  });

  auto t0 = Clock::now();
  if (!strcmp(action, "launch")) {
    neverLaunched<<<1, 1, 0, other>>>(hostDev + 2, 1);
    CHECK(cudaGetLastError());
  } else if (!strcmp(action, "modload")) {
    CUmodule m;
    CU(cuModuleLoadData(&m, kPtx));
  } else {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 64 << 20));
  }
  double actionMs = msSince(t0);
  bool released = waitHost(host + 1, 7, 2500);
  helper.join();
  printf("action call %.1f ms, helper submit %.1f ms, waiter %s\n", actionMs, submitMs.load(),
         released ? "released" : "NEVER released");
  return 0;
}
