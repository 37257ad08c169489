// ferry-ce-alltoall-mp: the all-to-all of ferry-ce-alltoall with one process
// per GPU, as Ferry runs (4x H200, session 28: Ferry's SM-free alltoall
// stayed at 190-215 GB/s per GPU whatever its copy order, while one process
// pushing in rotated order reached 358-364). Says whether processes alone,
// or GPU-gated copies, set that bound.
//
// Usage: ferry-ce-alltoall-mp [bytes per peer] [iters]   (every GPU)
// Buffers are shared by CUDA IPC handles; flags live in host memory shared
// by the processes (MAP_SHARED before fork) and mapped into each context.
// Each line (rank 0's clock): a pattern, time per iteration, GB/s each GPU
// sends to its peers:
//   cpu/same      CPU barrier, pushes issued peer 0, 1, ... (one stream per
//                 peer), streams joined, CPU barrier
//   cpu/rotated   the same, GPU g starting with peer g+1
//   gpu/same      no CPU sync in the loop, as ferry-bench's: per iteration
//                 each GPU's stream writes its `ready`; each push waits on
//                 its stream (one-thread kernel) for the receiver's `ready`,
//                 then writes `done`; the stream waits for every incoming
//                 `done` and its own pushes before the next iteration
//   gpu/rotated   the same, pushes issued rotated
//   gpu/all       rotated, each push also waiting for every peer's `ready`
//                 (the copies of a GPU released together)
//   gpu/nogate    gpu/rotated without the pushes' waits for `ready` (unsafe
//                 for real data; here nothing reads it): what the gates cost
//   gpu/memop     gpu/rotated with the gates as cuStreamWaitValue64
//   gpu/one       one wait for every peer's `ready` on the GPU's own stream,
//                 then the pushes rotated on that stream, one after another
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr int kMaxGpus = 8;

struct Shared {
  cudaIpcMemHandle_t recv[kMaxGpus];
  std::atomic<int> arrived;
  std::atomic<int> generation;
  alignas(64) uint64_t ready[kMaxGpus];           // GPU g's iteration reached
  alignas(64) uint64_t done[kMaxGpus][kMaxGpus];  // [src][dst]: push landed
};

// A CPU barrier of the n processes (sense by generation).
void barrier(Shared* sh, int n) {
  const int gen = sh->generation.load(std::memory_order_acquire);
  if (sh->arrived.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
    sh->arrived.store(0, std::memory_order_relaxed);
    sh->generation.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  while (sh->generation.load(std::memory_order_acquire) == gen) {
  }
}

struct Words {
  const volatile uint64_t* w[kMaxGpus];
  int count = 0;
  void add(const uint64_t* p) { w[count++] = p; }
};

// Spins until every word is >= value (system-scope acquire loads).
__global__ void waitAtLeast(Words words, uint64_t value) {
  for (int i = 0; i < words.count; ++i) {
    for (;;) {
      uint64_t v;
      asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(words.w[i]) : "memory");
      if (v >= value) break;
      __nanosleep(256);
    }
  }
}

__global__ void writeWord(uint64_t* word, uint64_t value) {
  // Release at system scope: the copies before this kernel on its stream
  // are complete (stream order) and visible before the word.
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
}

enum class Pattern {
  CpuSame,
  CpuRotated,
  GpuSame,
  GpuRotated,
  GpuAll,
  GpuNoGate,
  GpuMemop,
  GpuOne
};

struct Rank {
  int me = 0, n = 0;
  size_t bytes = 0;
  char* send = nullptr;
  char* recv = nullptr;
  std::vector<char*> peerRecv;        // mapped peers' receive buffers
  std::vector<cudaStream_t> streams;  // one per peer
  cudaStream_t user = nullptr;
  Shared* sh = nullptr;   // host view
  Shared* dsh = nullptr;  // device view of the same memory
};

int peerAt(const Rank& r, int k, bool rotated) {
  return rotated ? (r.me + k) % r.n : (k <= r.me ? k - 1 : k);
}

void pushAll(Rank& r, bool rotated) {
  for (int k = 1; k < r.n; ++k) {
    const int p = peerAt(r, k, rotated);
    CHECK(cudaMemcpyAsync(r.peerRecv[p] + r.me * r.bytes, r.send + p * r.bytes, r.bytes,
                          cudaMemcpyDefault, r.streams[p]));
  }
}

// One iteration `it` (>= 1) of the GPU-synchronized loop.
void gpuIteration(Rank& r, uint64_t it, Pattern pat, cudaEvent_t start,
                  std::vector<cudaEvent_t>& pushed) {
  const bool rotated = pat != Pattern::GpuSame;
  writeWord<<<1, 1, 0, r.user>>>(&r.dsh->ready[r.me], it);
  CHECK(cudaEventRecord(start, r.user));
  if (pat == Pattern::GpuOne) {
    Words all;
    for (int q = 0; q < r.n; ++q) {
      if (q != r.me) all.add(&r.dsh->ready[q]);
    }
    waitAtLeast<<<1, 1, 0, r.user>>>(all, it);
  }
  for (int k = 1; k < r.n; ++k) {
    const int p = peerAt(r, k, rotated);
    cudaStream_t s = pat == Pattern::GpuOne ? r.user : r.streams[p];
    if (pat != Pattern::GpuOne) CHECK(cudaStreamWaitEvent(s, start, 0));
    if (pat == Pattern::GpuMemop) {
      CUresult e = cuStreamWaitValue64(s, reinterpret_cast<CUdeviceptr>(&r.dsh->ready[p]), it,
                                       CU_STREAM_WAIT_VALUE_GEQ);
      if (e != CUDA_SUCCESS) {
        fprintf(stderr, "cuStreamWaitValue64 failed: %d\n", static_cast<int>(e));
        exit(1);
      }
    } else if (pat != Pattern::GpuNoGate && pat != Pattern::GpuOne) {
      Words gate;
      gate.add(&r.dsh->ready[p]);
      for (int q = 0; pat == Pattern::GpuAll && q < r.n; ++q) {
        if (q != p && q != r.me) gate.add(&r.dsh->ready[q]);
      }
      waitAtLeast<<<1, 1, 0, s>>>(gate, it);
    }
    CHECK(cudaMemcpyAsync(r.peerRecv[p] + r.me * r.bytes, r.send + p * r.bytes, r.bytes,
                          cudaMemcpyDefault, s));
    writeWord<<<1, 1, 0, s>>>(&r.dsh->done[r.me][p], it);
    CHECK(cudaEventRecord(pushed[p], s));
  }
  Words in;  // the incoming `done` words
  for (int p = 0; p < r.n; ++p) {
    if (p == r.me) continue;
    in.add(&r.dsh->done[p][r.me]);
    CHECK(cudaStreamWaitEvent(r.user, pushed[p], 0));
  }
  waitAtLeast<<<1, 1, 0, r.user>>>(in, it);
}

double run(Rank& r, Pattern pat, int iters, uint64_t* base) {
  const bool rotated = pat != Pattern::CpuSame;
  const bool gpu = pat != Pattern::CpuSame && pat != Pattern::CpuRotated;
  cudaEvent_t start;
  CHECK(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
  std::vector<cudaEvent_t> pushed(r.n);
  for (auto& e : pushed) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  barrier(r.sh, r.n);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i <= iters; ++i) {  // i == 0: warm-up
    if (i == 1) {
      CHECK(cudaDeviceSynchronize());
      barrier(r.sh, r.n);
      t0 = std::chrono::steady_clock::now();
    }
    if (gpu) {
      gpuIteration(r, ++*base, pat, start, pushed);
      continue;
    }
    barrier(r.sh, r.n);
    pushAll(r, rotated);
    for (cudaStream_t s : r.streams) CHECK(cudaStreamSynchronize(s));
    barrier(r.sh, r.n);
  }
  CHECK(cudaDeviceSynchronize());
  barrier(r.sh, r.n);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(cudaEventDestroy(start));
  for (auto& e : pushed) CHECK(cudaEventDestroy(e));
  return sec / iters;
}

int rankMain(int me, int n, size_t bytes, int iters, Shared* sh) {
  Rank r;
  r.me = me;
  r.n = n;
  r.bytes = bytes;
  r.sh = sh;
  CHECK(cudaSetDevice(me));
  CHECK(cudaHostRegister(sh, sizeof(Shared), cudaHostRegisterMapped | cudaHostRegisterPortable));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&r.dsh), sh, 0));
  CHECK(cudaMalloc(&r.send, bytes * n));
  CHECK(cudaMalloc(&r.recv, bytes * n));
  CHECK(cudaMemset(r.send, me + 1, bytes * n));
  CHECK(cudaIpcGetMemHandle(&sh->recv[me], r.recv));
  barrier(sh, n);
  r.peerRecv.assign(n, nullptr);
  r.streams.assign(n, nullptr);
  for (int p = 0; p < n; ++p) {
    CHECK(cudaStreamCreateWithFlags(&r.streams[p], cudaStreamNonBlocking));
    if (p == me) continue;
    CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&r.peerRecv[p]), sh->recv[p],
                               cudaIpcMemLazyEnablePeerAccess));
  }
  CHECK(cudaStreamCreateWithFlags(&r.user, cudaStreamNonBlocking));
  const struct {
    const char* name;
    Pattern pat;
  } kinds[] = {{"cpu/same", Pattern::CpuSame},   {"cpu/rotated", Pattern::CpuRotated},
               {"gpu/same", Pattern::GpuSame},   {"gpu/rotated", Pattern::GpuRotated},
               {"gpu/all", Pattern::GpuAll},     {"gpu/nogate", Pattern::GpuNoGate},
               {"gpu/memop", Pattern::GpuMemop}, {"gpu/one", Pattern::GpuOne}};
  uint64_t base = 0;  // the flags' iteration numbers only grow
  if (me == 0)
    printf("# %d processes, one GPU each, %zu bytes per peer, %d iterations\n", n, bytes, iters);
  for (const auto& k : kinds) {
    const double sec = run(r, k.pat, iters, &base);
    if (me == 0) {
      printf("%-12s %9.1f us  %7.1f GB/s per GPU\n", k.name, sec * 1e6,
             static_cast<double>(bytes) * (n - 1) / sec / 1e9);
      fflush(stdout);
    }
  }
  barrier(sh, n);
  for (int p = 0; p < n; ++p) {
    if (p != me) CHECK(cudaIpcCloseMemHandle(r.peerRecv[p]));
    CHECK(cudaStreamDestroy(r.streams[p]));
  }
  barrier(sh, n);  // every peer unmapped our buffer before we free it
  CHECK(cudaStreamDestroy(r.user));
  CHECK(cudaFree(r.send));
  CHECK(cudaFree(r.recv));
  CHECK(cudaHostUnregister(sh));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t{64} << 20);
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  // The GPU count without a CUDA context in this process (fork comes first).
  const char* env = getenv("FERRY_PROBE_GPUS");
  const int n = env != nullptr ? atoi(env) : 4;
  if (n < 2 || n > kMaxGpus) {
    fprintf(stderr, "ferry-ce-alltoall-mp: FERRY_PROBE_GPUS must be 2-%d (got %d)\n", kMaxGpus, n);
    return 2;
  }
  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  auto* sh = new (mem) Shared();
  std::vector<pid_t> kids;
  for (int g = 0; g < n; ++g) {
    pid_t pid = fork();
    if (pid == 0) _exit(rankMain(g, n, bytes, iters, sh));
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed == 0 ? 0 : 1;
}
