// The CUDA runtime on a real GPU: allocations, copies in every direction,
// stream memory operations against a host thread, events across streams, and
// a kernel launched through Runtime::launch. Skipped (reported as such)
// without a device, or when the build has no CUDA.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/random.h"
#include "runtime/runtime.h"

#ifdef FERRY_WITH_CUDA
const void* ferryTestAxpbKernel();  // runtime_kernels.cu
#endif

namespace ferry::rt {
namespace {

#ifndef FERRY_WITH_CUDA

TEST(RuntimeCuda, Skipped) {
  GTEST_SKIP() << "built without CUDA (-DFERRY_CUDA=OFF)";
}

#else

using namespace std::chrono_literals;

constexpr uint64_t kPoisonWord = 0xA5A5A5A5A5A5A5A5ull;

class RuntimeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (getRuntime(RuntimeKind::Cuda, &rt_) != ncclSuccess ||
        rt_->deviceCount(&count) != ncclSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    ASSERT_EQ(rt_->setDevice(0), ncclSuccess);
  }

  std::vector<uint64_t> randomWords(size_t n, uint64_t stream) {
    test::Rng rng(test::testSeed(), stream);
    std::vector<uint64_t> v(n);
    for (auto& w : v) w = rng.next();
    return v;
  }

  static uint64_t loadAcquire(uint64_t* w) {
    return std::atomic_ref<uint64_t>(*w).load(std::memory_order_acquire);
  }
  static bool waitWord(uint64_t* w, uint64_t value) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (loadAcquire(w) != value) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(10us);
    }
    return true;
  }
  static long firstMismatch(const uint64_t* got, const std::vector<uint64_t>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] != want[i]) return static_cast<long>(i);
    }
    return -1;
  }

  Runtime* rt_ = nullptr;
};

TEST_F(RuntimeCuda, DeviceFacts) {
  int count = 0, dev = -1;
  ASSERT_EQ(rt_->deviceCount(&count), ncclSuccess);
  ASSERT_EQ(rt_->currentDevice(&dev), ncclSuccess);
  EXPECT_EQ(dev, 0);
  std::string bus;
  ASSERT_EQ(rt_->pciBusId(0, &bus), ncclSuccess);
  EXPECT_EQ(bus.size(), 12u) << bus;  // dddd:bb:dd.f
  EXPECT_EQ(rt_->setDevice(count), ncclUnhandledCudaError);
}

TEST_F(RuntimeCuda, CopiesEveryDirection) {
  test::Rng rng(test::testSeed(), 11);
  size_t n = 1 + rng.below(4 << 20);
  size_t bytes = n * sizeof(uint64_t);
  auto data = randomWords(n, 12);
  std::unique_ptr<HostMemory> src, dst;
  std::unique_ptr<DeviceMemory> a, b;
  ASSERT_EQ(rt_->allocHost(bytes, &src), ncclSuccess);
  ASSERT_EQ(rt_->allocHost(bytes, &dst), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &a), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &b), ncclSuccess);
  memcpy(src->ptr(), data.data(), bytes);
  std::fill_n(static_cast<uint64_t*>(dst->ptr()), n, kPoisonWord);
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt_->createStream(&s), ncclSuccess);
  ASSERT_EQ(s->copyAsync(a->ptr(), src->ptr(), bytes), ncclSuccess);  // H2D
  ASSERT_EQ(s->copyAsync(b->ptr(), a->ptr(), bytes), ncclSuccess);    // D2D
  ASSERT_EQ(s->copyAsync(dst->ptr(), b->ptr(), bytes), ncclSuccess);  // D2H
  ASSERT_EQ(s->synchronize(), ncclSuccess);
  EXPECT_EQ(s->query(), ncclSuccess);
  EXPECT_EQ(firstMismatch(static_cast<uint64_t*>(dst->ptr()), data), -1);

  // Pageable memory through the legacy default stream (wrapUserStream(NULL)).
  std::vector<uint64_t> pageable(n, kPoisonWord);
  std::unique_ptr<Stream> legacy;
  ASSERT_EQ(rt_->wrapUserStream(nullptr, &legacy), ncclSuccess);
  EXPECT_EQ(legacy->nativeHandle(), nullptr);
  ASSERT_EQ(legacy->copyAsync(pageable.data(), a->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(legacy->synchronize(), ncclSuccess);
  EXPECT_EQ(firstMismatch(pageable.data(), data), -1);
}

TEST_F(RuntimeCuda, WriteWaitHandshakeWithHostThread) {
  test::Rng rng(test::testSeed(), 13);
  size_t n = 1 + rng.below(1 << 20);
  size_t bytes = n * sizeof(uint64_t);
  auto data = randomWords(n, 14);
  std::unique_ptr<HostMemory> words, out;
  std::unique_ptr<DeviceMemory> dev;
  ASSERT_EQ(rt_->allocHost(4096, &words), ncclSuccess);
  ASSERT_EQ(rt_->allocHost(bytes, &out), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &dev), ncclSuccess);
  memset(words->ptr(), 0, 4096);
  std::fill_n(static_cast<uint64_t*>(out->ptr()), n, kPoisonWord);
  auto* w = static_cast<uint64_t*>(words->ptr());
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt_->createStream(&s), ncclSuccess);
  ASSERT_EQ(s->copyAsync(dev->ptr(), data.data(), bytes), ncclSuccess);
  ASSERT_EQ(s->waitValue64(&w[0], 3, WaitCondition::Geq), ncclSuccess);
  ASSERT_EQ(s->copyAsync(out->ptr(), dev->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(s->writeValue64(&w[1], 7), ncclSuccess);
  ASSERT_EQ(s->waitValue64(&w[0], 10, WaitCondition::Eq), ncclSuccess);
  ASSERT_EQ(s->writeValue64(&w[1], 8), ncclSuccess);

  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(s->query(), ncclInProgress);
  EXPECT_EQ(loadAcquire(&w[1]), 0u);
  std::thread releaser([&] {
    std::atomic_ref<uint64_t>(w[0]).store(5, std::memory_order_release);
    ASSERT_TRUE(waitWord(&w[1], 7));
    std::atomic_ref<uint64_t>(w[0]).store(10, std::memory_order_release);
  });
  ASSERT_TRUE(waitWord(&w[1], 8));
  releaser.join();
  // writeValue64 fences prior work: the copy is complete when the flag shows.
  EXPECT_EQ(firstMismatch(static_cast<uint64_t*>(out->ptr()), data), -1);
  EXPECT_EQ(s->synchronize(), ncclSuccess);
}

TEST_F(RuntimeCuda, EventsAcrossStreams) {
  test::Rng rng(test::testSeed(), 15);
  size_t n = 1 + rng.below(1 << 20);
  size_t bytes = n * sizeof(uint64_t);
  auto data = randomWords(n, 16);
  // Pinned source: a pageable copy may synchronize the host with the (gated)
  // stream, which would deadlock this test.
  std::unique_ptr<HostMemory> gate, out, src;
  std::unique_ptr<DeviceMemory> a, b;
  ASSERT_EQ(rt_->allocHost(bytes, &src), ncclSuccess);
  memcpy(src->ptr(), data.data(), bytes);
  ASSERT_EQ(rt_->allocHost(64, &gate), ncclSuccess);
  ASSERT_EQ(rt_->allocHost(bytes, &out), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &a), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &b), ncclSuccess);
  memset(gate->ptr(), 0, 64);
  std::fill_n(static_cast<uint64_t*>(out->ptr()), n, kPoisonWord);
  auto* g = static_cast<uint64_t*>(gate->ptr());
  std::unique_ptr<Stream> s1, s2;
  std::unique_ptr<Event> e;
  ASSERT_EQ(rt_->createStream(&s1), ncclSuccess);
  ASSERT_EQ(rt_->createStream(&s2), ncclSuccess);
  ASSERT_EQ(rt_->createEvent(&e), ncclSuccess);
  ASSERT_EQ(s1->waitValue64(&g[0], 1, WaitCondition::Eq), ncclSuccess);
  ASSERT_EQ(s1->copyAsync(a->ptr(), src->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(e->record(*s1), ncclSuccess);
  ASSERT_EQ(s2->waitEvent(*e), ncclSuccess);
  ASSERT_EQ(s2->copyAsync(b->ptr(), a->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(s2->copyAsync(out->ptr(), b->ptr(), bytes), ncclSuccess);
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(e->query(), ncclInProgress);
  EXPECT_EQ(s2->query(), ncclInProgress);
  std::atomic_ref<uint64_t>(g[0]).store(1, std::memory_order_release);
  ASSERT_EQ(e->synchronize(), ncclSuccess);
  ASSERT_EQ(s2->synchronize(), ncclSuccess);
  EXPECT_EQ(e->query(), ncclSuccess);
  EXPECT_EQ(firstMismatch(static_cast<uint64_t*>(out->ptr()), data), -1);
}

TEST_F(RuntimeCuda, KernelLaunch) {
  test::Rng rng(test::testSeed(), 17);
  size_t n = 1 + rng.below(3 << 20);
  size_t bytes = n * sizeof(int64_t);
  std::vector<int64_t> in(n);
  for (auto& v : in) v = static_cast<int64_t>(rng.next() >> 20) - (1ll << 42);
  int64_t mul = rng.range(2, 1000), add = rng.range(-100000, 100000);
  std::unique_ptr<DeviceMemory> src, dst;
  ASSERT_EQ(rt_->allocDevice(bytes, &src), ncclSuccess);
  ASSERT_EQ(rt_->allocDevice(bytes, &dst), ncclSuccess);
  std::vector<int64_t> out(n, static_cast<int64_t>(kPoisonWord));
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt_->createStream(&s), ncclSuccess);
  ASSERT_EQ(s->copyAsync(src->ptr(), in.data(), bytes), ncclSuccess);
  ASSERT_EQ(s->copyAsync(dst->ptr(), out.data(), bytes), ncclSuccess);  // poison device side
  void* dstPtr = dst->ptr();
  void* srcPtr = src->ptr();
  void* args[] = {&dstPtr, &srcPtr, &mul, &add, &n};
  KernelLaunch k;
  k.func = ferryTestAxpbKernel();
  k.grid[0] = 120;
  k.block[0] = 256;
  k.args = args;
  ASSERT_EQ(rt_->launch(k, *s), ncclSuccess);
  ASSERT_EQ(s->copyAsync(out.data(), dst->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(s->synchronize(), ncclSuccess);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] * mul + add) << "element " << i;
}

// A forked child that does nothing but wait for its parent to let it go
// (it touches no CUDA state), ended and reaped at scope exit.
class ParkedChild {
 public:
  bool start() {
    int fds[2];
    if (pipe(fds) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[1]);
      char c;
      while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    close(fds[0]);
    gate_ = fds[1];
    return pid_ > 0;
  }
  ~ParkedChild() {
    if (gate_ >= 0) close(gate_);  // end of file: the child exits
    int status = 0;
    if (pid_ > 0) (void)waitpid(pid_, &status, 0);
  }

 private:
  pid_t pid_ = -1;
  int gate_ = -1;
};

// Host blocks of 4 MiB or more come from 2 MiB pages registered with CUDA
// (FERRY_HOST_HUGE_PAGES, session 48) where the kernel allows, else from
// cudaHostAlloc: either way the whole block is the size asked for, takes
// copies both ways, and is a stream memory operation target at its host
// address. A fork after the allocation (torch's DataLoader workers) must
// not move the parent's pages away from the GPU: the parent writes the
// block after the fork (a copy-on-write page would be replaced then), and a
// device -> host copy must still land where the parent reads.
TEST_F(RuntimeCuda, LargeHostBlocks) {
  test::Rng rng(test::testSeed(), 21);
  const size_t sizes[] = {size_t{4} << 20, (size_t{4} << 20) + 64, (size_t{64} << 20) + 64,
                          (size_t{4} << 20) + 8 * rng.below(size_t{36} << 17)};
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt_->createStream(&s), ncclSuccess);
  for (size_t bytes : sizes) {
    SCOPED_TRACE(bytes);
    const size_t n = bytes / sizeof(uint64_t);
    auto data = randomWords(n, 22 + bytes);
    std::unique_ptr<HostMemory> block;
    std::unique_ptr<DeviceMemory> dev;
    ASSERT_EQ(rt_->allocHost(bytes, &block), ncclSuccess);
    ASSERT_EQ(block->size(), bytes);
    ASSERT_EQ(rt_->allocDevice(bytes, &dev), ncclSuccess);
    auto* w = static_cast<uint64_t*>(block->ptr());
    memcpy(w, data.data(), bytes);
    ASSERT_EQ(s->copyAsync(dev->ptr(), w, bytes), ncclSuccess);  // H2D from the block
    ASSERT_EQ(s->synchronize(), ncclSuccess);

    // The child stays alive (parked on a pipe) until the checks are done:
    // only while it lives would the pages be shared copy-on-write.
    ParkedChild child;
    ASSERT_TRUE(child.start());
    std::fill_n(w, n, kPoisonWord);  // the parent's write after the fork
    ASSERT_EQ(s->copyAsync(w, dev->ptr(), bytes), ncclSuccess);  // D2H into the block
    // The last word as a memop target: the stream writes it after the copy.
    ASSERT_EQ(s->writeValue64(&w[n - 1], data[n - 1] ^ 1), ncclSuccess);
    ASSERT_TRUE(waitWord(&w[n - 1], data[n - 1] ^ 1));
    ASSERT_EQ(s->synchronize(), ncclSuccess);
    data[n - 1] ^= 1;
    EXPECT_EQ(firstMismatch(w, data), -1);
  }
}

TEST_F(RuntimeCuda, SelectAutoPicksCuda) {
  Runtime* r = nullptr;
  ASSERT_EQ(selectRuntime("auto", &r), ncclSuccess);
  EXPECT_EQ(r->kind(), RuntimeKind::Cuda);
  ASSERT_EQ(selectRuntime("cuda", &r), ncclSuccess);
  EXPECT_EQ(r, rt_);
}

#endif  // FERRY_WITH_CUDA

}  // namespace
}  // namespace ferry::rt
