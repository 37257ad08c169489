// ferry-call-cost: the host CPU time of each CUDA call an SM-free
// point-to-point launch makes, beside a kernel launch (what kernel p2p makes
// instead). Inside one process, Ferry's kernel p2p runs a CPU-paced torch
// pipelining step ~5% faster than its SM-free path (NOTES.md trap 68), and
// FERRY_PROFILE puts ~47-51 us of CPU in each SM-free launch under eager
// loading (second-side copies 10-20 us, fences 4-7, claims 4-22): this says
// which of those calls are dear and whether a cheaper form of each exists.
//
// Usage: ferry-call-cost [bytes] [rounds]   (GPUs 0 and 1, two processes)
// The parent owns a buffer on GPU 0 and exports it by legacy IPC (as a
// peer rank's buffer reaches Ferry); the child, on GPU 1, imports it and
// times each call: `rounds` rounds of 16 calls back to back on one stream
// (the CPU time of each call, steady clock), the stream drained between
// rounds (not timed). Each line: the call, the median and the minimum over
// rounds of the mean per call, in microseconds. A benchmark: nothing is
// checked but the calls' status.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "cuda_check.h"

namespace {

__global__ void emptyKernel() {}

__global__ void spinLike(const volatile uint64_t* word, uint64_t value, uint64_t timeout) {
  while (*word < value && timeout-- > 0) {
  }
}

__global__ void sleepKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

constexpr int kPerRound = 16;

double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Times `call` (given the index within its round) and prints its line.
void measure(const char* name, int rounds, cudaStream_t s, const std::function<void(int)>& call,
             const std::function<void()>& beforeRound = nullptr) {
  std::vector<double> perCall;
  for (int r = 0; r < rounds + 2; ++r) {
    if (beforeRound) beforeRound();
    double spent = 0;
    for (int i = 0; i < kPerRound; ++i) {
      const double t0 = nowUs();
      call(i);
      spent += nowUs() - t0;
    }
    CHECK(cudaStreamSynchronize(s));
    if (r >= 2) perCall.push_back(spent / kPerRound);  // two warm-up rounds
  }
  std::sort(perCall.begin(), perCall.end());
  printf("%-58s median %7.2f us  min %7.2f us\n", name, perCall[perCall.size() / 2], perCall[0]);
}

int child(int fd, size_t bytes, int rounds) {
  cudaIpcMemHandle_t handle;
  if (read(fd, &handle, sizeof(handle)) != static_cast<ssize_t>(sizeof(handle))) return 1;
  CHECK(cudaSetDevice(1));
  void* remote = nullptr;
  CHECK(cudaIpcOpenMemHandle(&remote, handle, cudaIpcMemLazyEnablePeerAccess));
  void *local = nullptr, *local2 = nullptr, *peer = nullptr;
  CHECK(cudaMalloc(&local, bytes));
  CHECK(cudaMalloc(&local2, bytes));
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&peer, bytes));  // GPU 0 memory of this process (peer access)
  CHECK(cudaSetDevice(1));
  cudaError_t pe = cudaDeviceEnablePeerAccess(0, 0);
  if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) CHECK(pe);
  (void)cudaGetLastError();
  uint64_t* hostWord = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&hostWord), 4096, cudaHostAllocMapped));
  uint64_t* devWord = nullptr;
  CHECK(cudaMalloc(&devWord, 4096));
  cudaStream_t s, s2;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(kPerRound);
  for (auto& e : ev) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const auto r = reinterpret_cast<CUdeviceptr>(remote);
  const auto l = reinterpret_cast<CUdeviceptr>(local);
  printf("ferry-call-cost: %zu bytes, %d rounds of %d calls, GPU 1 (remote: GPU 0 by IPC)\n", bytes,
         rounds, kPerRound);

  measure("cudaMemcpyAsync Default, pull from IPC peer", rounds, s,
          [&](int) { CHECK(cudaMemcpyAsync(local, remote, bytes, cudaMemcpyDefault, s)); });
  measure("cudaMemcpyAsync Default, push to IPC peer", rounds, s,
          [&](int) { CHECK(cudaMemcpyAsync(remote, local, bytes, cudaMemcpyDefault, s)); });
  measure("cudaMemcpyAsync DeviceToDevice, push to IPC peer", rounds, s,
          [&](int) { CHECK(cudaMemcpyAsync(remote, local, bytes, cudaMemcpyDeviceToDevice, s)); });
  measure("cuMemcpyDtoDAsync, push to IPC peer", rounds, s,
          [&](int) { CU_CHECK(cuMemcpyDtoDAsync(r, l, bytes, s)); });
  measure("cuMemcpyAsync, push to IPC peer", rounds, s,
          [&](int) { CU_CHECK(cuMemcpyAsync(r, l, bytes, s)); });
  measure("cudaMemcpyPeerAsync, push to GPU 0 (same process)", rounds, s,
          [&](int) { CHECK(cudaMemcpyPeerAsync(peer, 0, local, 1, bytes, s)); });
  measure("cudaMemcpyAsync Default, push to GPU 0 (same process)", rounds, s,
          [&](int) { CHECK(cudaMemcpyAsync(peer, local, bytes, cudaMemcpyDefault, s)); });
  measure("cudaMemcpyAsync Default, local to local", rounds, s,
          [&](int) { CHECK(cudaMemcpyAsync(local2, local, bytes, cudaMemcpyDefault, s)); });
  measure("cudaMemcpyAsync Default, push 4 KiB to IPC peer", rounds, s,
          [&](int) { CHECK(cudaMemcpyAsync(remote, local, 4096, cudaMemcpyDefault, s)); });
  measure(
      "cudaMemcpyAsync Default, push to IPC peer, GPU busy", rounds, s,
      [&](int) { CHECK(cudaMemcpyAsync(remote, local, bytes, cudaMemcpyDefault, s)); },
      [&] { sleepKernel<<<1, 1, 0, s>>>(2000000); });
  measure("cuStreamWriteValue64 host word, DEFAULT", rounds, s, [&](int i) {
    CU_CHECK(cuStreamWriteValue64(s, reinterpret_cast<CUdeviceptr>(hostWord), i,
                                  CU_STREAM_WRITE_VALUE_DEFAULT));
  });
  measure("cuStreamWriteValue64 device word, DEFAULT", rounds, s, [&](int i) {
    CU_CHECK(cuStreamWriteValue64(s, reinterpret_cast<CUdeviceptr>(devWord), i,
                                  CU_STREAM_WRITE_VALUE_DEFAULT));
  });
  measure("cuStreamWaitValue64 host word (already true)", rounds, s, [&](int) {
    CU_CHECK(cuStreamWaitValue64(s, reinterpret_cast<CUdeviceptr>(hostWord), 0,
                                 CU_STREAM_WAIT_VALUE_GEQ));
  });
  measure("cuStreamBatchMemOp write + write (host words)", rounds, s, [&](int i) {
    CUstreamBatchMemOpParams p[2] = {};
    for (int k = 0; k < 2; ++k) {
      p[k].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
      p[k].writeValue.address = reinterpret_cast<CUdeviceptr>(hostWord + 8 * (k + 1));
      p[k].writeValue.value64 = i;
      p[k].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
    }
    CU_CHECK(cuStreamBatchMemOp(s, 2, p, 0));
  });
  measure("cudaLaunchKernel empty <<<1,1>>>", rounds, s,
          [&](int) { emptyKernel<<<1, 1, 0, s>>>(); });
  {
    // The spin kernel's launch, as Ferry makes it (three arguments), and
    // the same kernel through the driver API.
    const volatile uint64_t* word = hostWord;
    uint64_t target = 0, timeout = 1;
    void* args[] = {&word, &target, &timeout};
    measure("cudaLaunchKernel spin-like, 3 arguments", rounds, s, [&](int) {
      CHECK(
          cudaLaunchKernel(reinterpret_cast<const void*>(spinLike), dim3(1), dim3(1), args, 0, s));
    });
    cudaFunction_t fn = nullptr;
    CHECK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(spinLike)));
    measure("cuLaunchKernel spin-like, 3 arguments", rounds, s, [&](int) {
      CU_CHECK(
          cuLaunchKernel(reinterpret_cast<CUfunction>(fn), 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
    });
  }
  measure("cudaEventRecord", rounds, s, [&](int i) { CHECK(cudaEventRecord(ev[i], s)); });
  measure("cudaEventQuery (passed)", rounds, s, [&](int i) { (void)cudaEventQuery(ev[i]); });
  measure(
      "cudaEventQuery (pending)", rounds, s, [&](int i) { (void)cudaEventQuery(ev[i]); },
      [&] {
        sleepKernel<<<1, 1, 0, s>>>(2000000);
        for (auto& e : ev) CHECK(cudaEventRecord(e, s));
      });
  measure("cudaStreamWaitEvent (other stream's event)", rounds, s, [&](int i) {
    CHECK(cudaEventRecord(ev[i], s2));
    CHECK(cudaStreamWaitEvent(s, ev[i], 0));
  });
  measure("  (cudaEventRecord on the other stream alone)", rounds, s2,
          [&](int i) { CHECK(cudaEventRecord(ev[i], s2)); });
  measure("cudaStreamIsCapturing", rounds, s, [&](int) {
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s, &st));
  });
  measure("cudaPointerGetAttributes (IPC peer pointer)", rounds, s, [&](int) {
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, remote));
  });
  measure("cuPointerGetAttribute BUFFER_ID (local)", rounds, s, [&](int) {
    unsigned long long id = 0;
    CU_CHECK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, l));
  });
  measure("cudaGetDevice + cudaSetDevice (same device)", rounds, s, [&](int) {
    int d = 0;
    CHECK(cudaGetDevice(&d));
    CHECK(cudaSetDevice(d));
  });
  CHECK(cudaIpcCloseMemHandle(remote));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 10) : (size_t{16} << 20);
  const int rounds = argc > 2 ? atoi(argv[2]) : 200;
  int fds[2], done[2];
  if (pipe(fds) != 0 || pipe(done) != 0) return 1;
  const pid_t pid = fork();  // before any CUDA call: each process its own context
  if (pid == 0) {
    close(fds[1]);
    close(done[0]);
    const int rc = child(fds[0], bytes, rounds);
    close(done[1]);
    return rc;
  }
  close(fds[0]);
  close(done[1]);
  CHECK(cudaSetDevice(0));
  void* buf = nullptr;
  CHECK(cudaMalloc(&buf, bytes));
  cudaIpcMemHandle_t handle;
  CHECK(cudaIpcGetMemHandle(&handle, buf));
  if (write(fds[1], &handle, sizeof(handle)) != static_cast<ssize_t>(sizeof(handle))) return 1;
  char c;
  (void)read(done[0], &c, 1);  // the child closes its end when it is done
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(cudaFree(buf));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
