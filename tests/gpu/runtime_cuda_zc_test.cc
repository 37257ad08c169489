// The CUDA runtime's support for the SM-free point-to-point path on a real
// GPU: registered host words carrying writeValue64 -> waitValue64Spin between
// streams and host threads, the spin wait released by a host write, a
// preloaded wait kernel launching while another stream sits in
// cuStreamWaitValue (the lazy-loading hazard of DESIGN.md), describeAllocation
// over every kind of memory, the loading mode under CUDA_MODULE_LOADING, peer
// access and priority streams. Skipped without a device or without CUDA.
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/random.h"
#include "runtime/runtime.h"

#ifdef FERRY_WITH_CUDA
#include <cuda_runtime.h>
#endif

extern char** environ;

namespace ferry::rt {
namespace {

#ifndef FERRY_WITH_CUDA

TEST(RuntimeCudaZc, Skipped) {
  GTEST_SKIP() << "built without CUDA (-DFERRY_CUDA=OFF)";
}

#else

using namespace std::chrono_literals;

constexpr uint8_t kPoison = 0xA5;

uint64_t loadAcquire(const uint64_t* w) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(w)).load(std::memory_order_acquire);
}
void storeRelease(uint64_t* w, uint64_t v) {
  std::atomic_ref<uint64_t>(*w).store(v, std::memory_order_release);
}
bool waitWord(const uint64_t* w, uint64_t value, std::chrono::milliseconds timeout = 10000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (loadAcquire(w) != value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10us);
  }
  return true;
}

std::vector<uint8_t> randomBytes(size_t n, test::Rng& rng) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng.next();
    memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

long firstMismatch(const void* got, const std::vector<uint8_t>& want) {
  auto* g = static_cast<const uint8_t*>(got);
  for (size_t i = 0; i < want.size(); ++i) {
    if (g[i] != want[i]) return static_cast<long>(i);
  }
  return -1;
}

// One page of MAP_SHARED memory, as a memfd control block is mapped.
struct SharedPage {
  SharedPage() {
    length = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base != MAP_FAILED) memset(base, 0, length);
  }
  ~SharedPage() {
    if (base != MAP_FAILED) munmap(base, length);
  }
  void* base;
  size_t length;
};

class RuntimeCudaZc : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (getRuntime(RuntimeKind::Cuda, &rt_) != ncclSuccess ||
        rt_->deviceCount(&count) != ncclSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    devices_ = count;
    ASSERT_EQ(rt_->setDevice(0), ncclSuccess);
    ASSERT_EQ(rt_->preloadKernels(), ncclSuccess);
  }
  Runtime* rt_ = nullptr;
  int devices_ = 0;
};

TEST_F(RuntimeCudaZc, RegisteredWordCarriesWriteToSpinWaitAndHost) {
  test::Rng rng(test::testSeed(), 201);
  SharedPage page;
  ASSERT_NE(page.base, MAP_FAILED);
  std::unique_ptr<HostRegistration> reg;
  ASSERT_EQ(rt_->registerHost(page.base, page.length, &reg), ncclSuccess);
  EXPECT_EQ(reg->hostPtr(), page.base);
  ASSERT_NE(reg->devicePtr(), nullptr);
  auto* dev = static_cast<uint64_t*>(reg->devicePtr());
  auto* host = static_cast<uint64_t*>(reg->hostPtr());
  // Registering any of the same pages again is refused, not silently shared.
  std::unique_ptr<HostRegistration> twice;
  EXPECT_EQ(rt_->registerHost(static_cast<char*>(page.base) + 64, 64, &twice), ncclInvalidUsage);

  size_t bytes = 4096 + rng.below(8 << 20);
  std::unique_ptr<DeviceMemory> src, dst;
  ASSERT_EQ(rt_->allocDevice(bytes, &src), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &dst), ncclSuccess);
  auto data = randomBytes(bytes, rng);
  std::vector<uint8_t> poison(bytes, kPoison);
  // Pinned: a copy queued behind the spin wait must not block this thread
  // (a copy to pageable memory would, and the producer below never runs).
  std::unique_ptr<HostMemory> pinnedOut;
  ASSERT_EQ(rt_->allocHost(bytes, &pinnedOut), ncclSuccess);
  auto* outPtr = static_cast<uint8_t*>(pinnedOut->ptr());
  std::unique_ptr<Stream> producer, consumer;
  ASSERT_EQ(rt_->createStream(&producer), ncclSuccess);
  ASSERT_EQ(rt_->createStreamWithPriority(-1, &consumer), ncclSuccess);
  ASSERT_EQ(producer->copyAsync(dst->ptr(), poison.data(), bytes), ncclSuccess);
  ASSERT_EQ(producer->synchronize(), ncclSuccess);

  uint64_t target = 1 + rng.below(1 << 30);
  ASSERT_EQ(consumer->waitValue64Spin(&dev[0], target), ncclSuccess);
  ASSERT_EQ(consumer->copyAsync(outPtr, dst->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(consumer->writeValue64(&dev[1], target + 1), ncclSuccess);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(consumer->query(), ncclInProgress);  // held by the spin kernel
  ASSERT_EQ(producer->copyAsync(src->ptr(), data.data(), bytes), ncclSuccess);
  ASSERT_EQ(producer->copyAsync(dst->ptr(), src->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(producer->writeValue64(&dev[0], target), ncclSuccess);
  ASSERT_TRUE(waitWord(&host[0], target));      // a host thread sees the word
  ASSERT_TRUE(waitWord(&host[1], target + 1));  // and the consumer ran after it
  ASSERT_EQ(consumer->synchronize(), ncclSuccess);
  std::vector<uint8_t> out(outPtr, outPtr + bytes);
  EXPECT_EQ(firstMismatch(out.data(), data), -1);
  ASSERT_EQ(producer->synchronize(), ncclSuccess);
}

TEST_F(RuntimeCudaZc, SpinWaitReleasedByHostWriteOnEveryWordKind) {
  test::Rng rng(test::testSeed(), 202);
  SharedPage page;
  ASSERT_NE(page.base, MAP_FAILED);
  std::unique_ptr<HostRegistration> reg;
  ASSERT_EQ(rt_->registerHost(page.base, page.length, &reg), ncclSuccess);
  std::unique_ptr<HostMemory> pinned;
  ASSERT_EQ(rt_->allocHost(64, &pinned), ncclSuccess);
  memset(pinned->ptr(), 0, 64);
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt_->createStream(&s), ncclSuccess);
  struct Case {
    const char* name;
    uint64_t* dev;
    uint64_t* host;
  } cases[] = {
      {"registered", static_cast<uint64_t*>(reg->devicePtr()),
       static_cast<uint64_t*>(reg->hostPtr())},
      {"allocHost", static_cast<uint64_t*>(pinned->ptr()), static_cast<uint64_t*>(pinned->ptr())},
  };
  // The copy queued behind each wait goes device -> pinned host, which
  // cudaMemcpyAsync runs asynchronously. Host -> host copies (the first
  // version of this test) are fully synchronous with respect to the host
  // (CUDA's API synchronization rules): the call itself waited for the spin
  // kernel, so the store that releases it was never reached (the test hung).
  std::unique_ptr<HostMemory> ends;
  ASSERT_EQ(rt_->allocHost(2 * sizeof(uint64_t), &ends), ncclSuccess);
  uint64_t& src = static_cast<uint64_t*>(ends->ptr())[0];
  uint64_t& dst = static_cast<uint64_t*>(ends->ptr())[1];
  std::unique_ptr<DeviceMemory> srcDev;
  ASSERT_EQ(rt_->allocDevice(sizeof(uint64_t), &srcDev), ncclSuccess);
  std::unique_ptr<Stream> loader;
  ASSERT_EQ(rt_->createStream(&loader), ncclSuccess);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    uint64_t target = 2 + rng.below(1 << 20);
    storeRelease(c.host, target - 1);  // one short: must keep waiting
    src = rng.next();
    dst = 0;
    ASSERT_EQ(loader->copyAsync(srcDev->ptr(), &src, sizeof(src)), ncclSuccess);
    ASSERT_EQ(loader->synchronize(), ncclSuccess);
    ASSERT_EQ(s->waitValue64Spin(c.dev, target), ncclSuccess);
    ASSERT_EQ(s->copyAsync(&dst, srcDev->ptr(), sizeof(src)), ncclSuccess);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(s->query(), ncclInProgress);
    EXPECT_EQ(dst, 0u);
    storeRelease(c.host, target + rng.below(5));  // >= releases
    ASSERT_EQ(s->synchronize(), ncclSuccess);
    EXPECT_EQ(dst, src);
  }
  // A device-memory word written by another stream.
  std::unique_ptr<DeviceMemory> flag;
  ASSERT_EQ(rt_->allocDevice(64, &flag), ncclSuccess);
  std::unique_ptr<Stream> writer;
  ASSERT_EQ(rt_->createStream(&writer), ncclSuccess);
  src = rng.next();
  dst = 0;
  ASSERT_EQ(loader->copyAsync(srcDev->ptr(), &src, sizeof(src)), ncclSuccess);
  ASSERT_EQ(loader->synchronize(), ncclSuccess);
  dst = 0;  // reused below as the zero that clears the flag
  ASSERT_EQ(writer->copyAsync(flag->ptr(), &dst, sizeof(dst)), ncclSuccess);
  ASSERT_EQ(writer->synchronize(), ncclSuccess);
  auto* word = static_cast<uint64_t*>(flag->ptr());
  ASSERT_EQ(s->waitValue64Spin(word, 3), ncclSuccess);
  ASSERT_EQ(s->copyAsync(&dst, srcDev->ptr(), sizeof(src)), ncclSuccess);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(s->query(), ncclInProgress);
  ASSERT_EQ(writer->writeValue64(word, 3), ncclSuccess);
  ASSERT_EQ(s->synchronize(), ncclSuccess);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(s->waitValue64Spin(nullptr, 1), ncclInvalidArgument);
}

// What the default SM-free mode relies on: while one stream sits in Ferry's
// one-thread wait kernel (a receive waiting for its peer), a kernel launched
// on another stream (here a second wait kernel whose word is already set)
// runs and finishes at once. The same check with the first stream parked in
// cuStreamWaitValue64 instead fails on H200 / driver 580 under both module
// loading modes and with 1 or 32 device connections: the second kernel does
// not run until the stream wait is released. That is why memop user waits
// are not the default (NOTES.md).
TEST_F(RuntimeCudaZc, WaitKernelRunsBesideAnotherWaitKernel) {
  SharedPage page;
  ASSERT_NE(page.base, MAP_FAILED);
  std::unique_ptr<HostRegistration> reg;
  ASSERT_EQ(rt_->registerHost(page.base, page.length, &reg), ncclSuccess);
  auto* dev = static_cast<uint64_t*>(reg->devicePtr());
  auto* host = static_cast<uint64_t*>(reg->hostPtr());
  fprintf(stderr, "lazy module loading: %d\n", rt_->lazyModuleLoading() ? 1 : 0);
  std::unique_ptr<Stream> gated, other;
  ASSERT_EQ(rt_->createStream(&gated), ncclSuccess);
  ASSERT_EQ(rt_->createStream(&other), ncclSuccess);
  ASSERT_EQ(gated->waitValue64Spin(&dev[0], 1), ncclSuccess);
  // Safety valve: if the second kernel wedges, this releases the first after
  // 5 s and the elapsed-time check fails instead of the test hanging.
  std::thread valve([host] {
    std::this_thread::sleep_for(5s);
    storeRelease(&host[0], 1);
  });
  storeRelease(&host[1], 9);
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(other->waitValue64Spin(&dev[1], 9), ncclSuccess);
  Status synced = other->synchronize();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(synced, ncclSuccess);
  EXPECT_LT(elapsed, 2s) << "a kernel on another stream waited for the parked wait kernel";
  EXPECT_EQ(gated->query(), elapsed < 2s ? ncclInProgress : ncclSuccess);
  storeRelease(&host[0], 1);
  valve.join();
  EXPECT_EQ(gated->synchronize(), ncclSuccess);
}

TEST_F(RuntimeCudaZc, DescribeAllocationOverMemoryKinds) {
  test::Rng rng(test::testSeed(), 203);
  // Only allocations owning whole 2 MiB driver chunks are mappable.
  size_t bytes = (2u << 20) * (1 + rng.below(8));
  std::unique_ptr<DeviceMemory> small;
  ASSERT_EQ(rt_->allocDevice(64 + rng.below(1 << 20), &small), ncclSuccess);
  AllocationInfo smallInfo;
  ASSERT_EQ(rt_->describeAllocation(small->ptr(), 64, &smallInfo), ncclSuccess);
  EXPECT_FALSE(smallInfo.mappable);
  std::unique_ptr<DeviceMemory> mem;
  ASSERT_EQ(rt_->allocDevice(bytes, &mem), ncclSuccess);  // cudaMalloc
  auto* base = static_cast<char*>(mem->ptr());
  AllocationInfo whole, again, inner, straddle;
  ASSERT_EQ(rt_->describeAllocation(base, bytes, &whole), ncclSuccess);
  ASSERT_TRUE(whole.mappable);
  EXPECT_NE(whole.allocId, 0u);
  EXPECT_EQ(whole.base, reinterpret_cast<uint64_t>(base));
  EXPECT_GE(whole.size, bytes);
  EXPECT_EQ(whole.ipc.type, IpcDescriptor::Type::CudaLegacy);
  EXPECT_EQ(whole.ipc.offset, 0u);
  EXPECT_EQ(whole.ipc.size, whole.size);
  EXPECT_EQ(whole.ipc.fd, -1);
  ASSERT_EQ(rt_->describeAllocation(base, bytes, &again), ncclSuccess);
  EXPECT_EQ(again.allocId, whole.allocId);  // stable, and the cached handle
  EXPECT_EQ(memcmp(again.ipc.bytes, whole.ipc.bytes, sizeof(whole.ipc.bytes)), 0);
  size_t off = 1 + rng.below(bytes - 1);
  ASSERT_EQ(rt_->describeAllocation(base + off, bytes - off, &inner), ncclSuccess);
  EXPECT_TRUE(inner.mappable);
  EXPECT_EQ(inner.allocId, whole.allocId);
  EXPECT_EQ(inner.base, whole.base);
  ASSERT_EQ(rt_->describeAllocation(base + whole.size - 8, 16, &straddle), ncclSuccess);
  EXPECT_FALSE(straddle.mappable);

  // Repeats are cheap: one driver query and a cache hit.
  auto start = std::chrono::steady_clock::now();
  constexpr int kRepeats = 10000;
  for (int i = 0; i < kRepeats; ++i) {
    ASSERT_EQ(rt_->describeAllocation(base + off, 1, &inner), ncclSuccess);
  }
  double usPerCall =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      kRepeats;
  fprintf(stderr, "describeAllocation: %.2f us per call\n", usPerCall);
  EXPECT_LT(usPerCall, 50.0);

  // Not mappable: pinned host, plain host, managed and pool memory.
  std::unique_ptr<HostMemory> pinned;
  ASSERT_EQ(rt_->allocHost(4096, &pinned), ncclSuccess);
  std::vector<uint64_t> heap(512);
  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 1 << 16), cudaSuccess);
  void* pooled = nullptr;
  cudaStream_t cs = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&pooled, 1 << 16, cs), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
  for (const void* p : {pinned->ptr(), static_cast<void*>(heap.data()), managed, pooled}) {
    AllocationInfo info;
    info.mappable = true;
    ASSERT_EQ(rt_->describeAllocation(p, 8, &info), ncclSuccess) << p;
    EXPECT_FALSE(info.mappable) << p;
  }
  EXPECT_EQ(cudaFreeAsync(pooled, cs), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(cs), cudaSuccess);
  EXPECT_EQ(cudaFree(managed), cudaSuccess);

  // Freed and reallocated (often at the same address): always a new id.
  uint64_t oldId = whole.allocId;
  mem.reset();
  ASSERT_EQ(rt_->allocDevice(bytes, &mem), ncclSuccess);
  ASSERT_EQ(rt_->describeAllocation(mem->ptr(), bytes, &again), ncclSuccess);
  ASSERT_TRUE(again.mappable);
  EXPECT_NE(again.allocId, oldId);
  fprintf(stderr, "reallocation %s the freed address\n",
          again.base == whole.base ? "reused" : "did not reuse");
  UniqueFd fd;
  EXPECT_EQ(rt_->exportAllocationFd(again.allocId, &fd), ncclInvalidUsage);
}

// Runs the helper with CUDA_MODULE_LOADING=mode; returns its "lazy=" line.
std::string loadingModeOf(const char* mode) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, "CUDA_MODULE_LOADING=", 20) != 0) env.emplace_back(*e);
  }
  env.push_back(std::string("CUDA_MODULE_LOADING=") + mode);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  int pipeFds[2];
  if (pipe(pipeFds) != 0) return "pipe failed";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipeFds[0]);
  char arg0[] = FERRY_ZC_HELPER;
  char arg1[] = "--loading-mode";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, arg0, &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipeFds[1]);
  std::string out;
  if (rc == 0) {
    char buf[256];
    ssize_t n;
    while ((n = read(pipeFds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    waitpid(pid, nullptr, 0);
  }
  close(pipeFds[0]);
  return out;
}

TEST_F(RuntimeCudaZc, LazyModuleLoadingFollowsEnvironment) {
  EXPECT_EQ(loadingModeOf("LAZY"), "lazy=1\n");
  EXPECT_EQ(loadingModeOf("EAGER"), "lazy=0\n");
}

TEST_F(RuntimeCudaZc, PeerAccessAndPriorityStreams) {
  bool can = true;
  ASSERT_EQ(rt_->canAccessPeer(0, 0, &can), ncclSuccess);
  EXPECT_FALSE(can);
  EXPECT_EQ(rt_->enablePeerAccess(0), ncclSuccess);  // itself: nothing to do
  if (devices_ >= 2) {
    ASSERT_EQ(rt_->canAccessPeer(0, 1, &can), ncclSuccess);
    if (can) {
      EXPECT_EQ(rt_->enablePeerAccess(1), ncclSuccess);
      EXPECT_EQ(rt_->enablePeerAccess(1), ncclSuccess);  // idempotent
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);        // and leaves no error behind
    }
  }
  std::unique_ptr<Stream> s;
  EXPECT_EQ(rt_->createStreamWithPriority(1, &s), ncclInvalidArgument);
  ASSERT_EQ(rt_->createStreamWithPriority(-1, &s), ncclSuccess);
  int priority = 0, least = 0, greatest = 0;
  ASSERT_EQ(cudaStreamGetPriority(static_cast<cudaStream_t>(s->nativeHandle()), &priority),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  uint64_t src = test::Rng(test::testSeed(), 204).next(), dst = 0;
  ASSERT_EQ(s->copyAsync(&dst, &src, sizeof(src)), ncclSuccess);
  ASSERT_EQ(s->synchronize(), ncclSuccess);
  EXPECT_EQ(dst, src);
}

#endif  // FERRY_WITH_CUDA

}  // namespace
}  // namespace ferry::rt
