// The host runtime as a faithful test double: asynchronous ordered streams,
// events across streams, stream memory operations, sticky errors, the
// synchronous NULL stream, devices, IPC inside one process, kernel launches,
// user streams by handle, and thread hygiene.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/random.h"
#include "core/params.h"
#include "runtime/host/host_runtime.h"
#include "runtime/runtime.h"
#include "runtime/user_streams.h"

namespace ferry::rt {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kPoison = 0xA5;

std::unique_ptr<Runtime> testRuntime(int64_t waitTimeoutMs = 20000, int devices = 4,
                                     int initialDevice = 0) {
  HostRuntimeOptions o;
  o.deviceCount = devices;
  o.initialDevice = initialDevice;
  o.waitTimeoutMs = waitTimeoutMs;
  return makeHostRuntime(o);
}

std::vector<uint8_t> randomBytes(size_t n, test::Rng& rng) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng.next();
    memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

// Index of the first differing byte, or -1.
long firstMismatch(const void* got, const std::vector<uint8_t>& want) {
  auto* g = static_cast<const uint8_t*>(got);
  for (size_t i = 0; i < want.size(); ++i) {
    if (g[i] != want[i]) return static_cast<long>(i);
  }
  return -1;
}

uint64_t loadAcquire(uint64_t* word) {
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
}

void storeRelease(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t>(*word).store(value, std::memory_order_release);
}

// Polls a word from the host side, bounded.
bool waitWord(uint64_t* word, uint64_t value, std::chrono::milliseconds timeout = 10000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (loadAcquire(word) != value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20us);
  }
  return true;
}

int countTasks() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

struct Buffers {
  std::unique_ptr<DeviceMemory> src, mid, dst, flags;
};

Buffers makeBuffers(Runtime& rt, size_t bytes) {
  Buffers b;
  EXPECT_EQ(rt.allocDevice(bytes, &b.src), ncclSuccess);
  EXPECT_EQ(rt.allocDevice(bytes, &b.mid), ncclSuccess);
  EXPECT_EQ(rt.allocDevice(bytes, &b.dst), ncclSuccess);
  EXPECT_EQ(rt.allocDevice(4096, &b.flags), ncclSuccess);
  memset(b.mid->ptr(), kPoison, bytes);
  memset(b.dst->ptr(), kPoison, bytes);
  memset(b.flags->ptr(), 0, 4096);
  return b;
}

uint64_t* word(const Buffers& b, int i) {
  return static_cast<uint64_t*>(b.flags->ptr()) + i;
}

TEST(RuntimeHost, OrderedCopiesThenFlag) {
  test::Rng rng(test::testSeed(), 1);
  auto rt = testRuntime();
  size_t bytes = (1 << 20) + rng.below(1 << 20);
  Buffers b = makeBuffers(*rt, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);

  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt->createStream(&s), ncclSuccess);
  // A gate first: everything behind it must stay pending (asynchrony).
  ASSERT_EQ(s->waitValue64(word(b, 0), 1, WaitCondition::Geq), ncclSuccess);
  ASSERT_EQ(s->copyAsync(b.mid->ptr(), b.src->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(s->copyAsync(b.dst->ptr(), b.mid->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(s->writeValue64(word(b, 1), 42), ncclSuccess);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(s->query(), ncclInProgress);
  EXPECT_EQ(loadAcquire(word(b, 1)), 0u);
  EXPECT_EQ(static_cast<uint8_t*>(b.dst->ptr())[bytes - 1], kPoison);

  storeRelease(word(b, 0), 1);
  // The host observes the flag; the release/acquire pair makes the copies visible.
  ASSERT_TRUE(waitWord(word(b, 1), 42));
  EXPECT_EQ(firstMismatch(b.dst->ptr(), data), -1);
  EXPECT_EQ(s->synchronize(), ncclSuccess);
  EXPECT_EQ(s->query(), ncclSuccess);
}

// Rows between different pitches land where cudaMemcpy2DAsync puts them, the
// gaps between rows keep their old bytes, and bad pitches are refused.
TEST(RuntimeHost, CopyRowsBetweenPitches) {
  test::Rng rng(test::testSeed(), 9);
  auto rt = testRuntime();
  const size_t width = 16 + rng.below(200), srcPitch = width + rng.below(64);
  const size_t dstPitch = width + 1 + rng.below(64), height = 3 + rng.below(40);
  const size_t bytes = std::max(srcPitch, dstPitch) * height;
  Buffers b = makeBuffers(*rt, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt->createStream(&s), ncclSuccess);
  ASSERT_EQ(s->copyRowsAsync(b.dst->ptr(), dstPitch, b.src->ptr(), srcPitch, width, height),
            ncclSuccess);
  ASSERT_EQ(s->synchronize(), ncclSuccess);
  const auto* dst = static_cast<const uint8_t*>(b.dst->ptr());
  for (size_t i = 0; i < bytes; ++i) {
    const size_t r = i / dstPitch, c = i % dstPitch;
    const int want = r < height && c < width ? data[r * srcPitch + c] : kPoison;
    ASSERT_EQ(dst[i], want) << "byte " << i << " (row " << r << ", column " << c << ")";
  }
  EXPECT_EQ(s->copyRowsAsync(b.dst->ptr(), width - 1, b.src->ptr(), srcPitch, width, 2),
            ncclInvalidArgument);
  EXPECT_EQ(s->copyRowsAsync(nullptr, dstPitch, b.src->ptr(), srcPitch, width, 2),
            ncclInvalidArgument);
  EXPECT_EQ(s->copyRowsAsync(b.dst->ptr(), dstPitch, b.src->ptr(), srcPitch, width, 0),
            ncclSuccess);
  EXPECT_EQ(s->synchronize(), ncclSuccess);
}

TEST(RuntimeHost, EventsAcrossStreams) {
  test::Rng rng(test::testSeed(), 2);
  auto rt = testRuntime();
  size_t bytes = 4096 + rng.below(1 << 18);
  Buffers b = makeBuffers(*rt, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);

  std::unique_ptr<Stream> a, c;
  std::unique_ptr<Event> e;
  ASSERT_EQ(rt->createStream(&a), ncclSuccess);
  ASSERT_EQ(rt->createStream(&c), ncclSuccess);
  ASSERT_EQ(rt->createEvent(&e), ncclSuccess);
  EXPECT_EQ(e->query(), ncclSuccess);  // never recorded: complete, as in CUDA

  ASSERT_EQ(a->waitValue64(word(b, 0), 1, WaitCondition::Eq), ncclSuccess);
  ASSERT_EQ(a->copyAsync(b.mid->ptr(), b.src->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(e->record(*a), ncclSuccess);
  // Work enqueued on `a` after the record is not part of the event.
  ASSERT_EQ(a->waitValue64(word(b, 2), 1, WaitCondition::Eq), ncclSuccess);

  ASSERT_EQ(c->waitEvent(*e), ncclSuccess);
  ASSERT_EQ(c->copyAsync(b.dst->ptr(), b.mid->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(c->writeValue64(word(b, 1), 5), ncclSuccess);

  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(e->query(), ncclInProgress);
  EXPECT_EQ(c->query(), ncclInProgress);
  EXPECT_EQ(static_cast<uint8_t*>(b.dst->ptr())[0], kPoison);

  storeRelease(word(b, 0), 1);
  EXPECT_EQ(e->synchronize(), ncclSuccess);
  EXPECT_EQ(c->synchronize(), ncclSuccess);  // does not need a's second wait
  EXPECT_EQ(loadAcquire(word(b, 1)), 5u);
  EXPECT_EQ(firstMismatch(b.dst->ptr(), data), -1);
  EXPECT_EQ(a->query(), ncclInProgress);
  storeRelease(word(b, 2), 1);
  EXPECT_EQ(a->synchronize(), ncclSuccess);
}

TEST(RuntimeHost, WaitValueReleasedByAnotherThread) {
  auto rt = testRuntime();
  Buffers b = makeBuffers(*rt, 64);
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt->createStream(&s), ncclSuccess);
  // Geq is cyclic, as in CUDA: 3 is "after" 2^64 - 2.
  const uint64_t target = ~0ull - 1;
  ASSERT_EQ(s->waitValue64(word(b, 0), target, WaitCondition::Geq), ncclSuccess);
  ASSERT_EQ(s->writeValue64(word(b, 1), 1), ncclSuccess);
  ASSERT_EQ(s->waitValue64(word(b, 0), 77, WaitCondition::Eq), ncclSuccess);
  ASSERT_EQ(s->writeValue64(word(b, 1), 2), ncclSuccess);

  std::thread releaser([&] {
    std::this_thread::sleep_for(30ms);
    storeRelease(word(b, 0), 3);
    std::this_thread::sleep_for(30ms);
    storeRelease(word(b, 0), 77);
  });
  ASSERT_TRUE(waitWord(word(b, 1), 1));
  ASSERT_TRUE(waitWord(word(b, 1), 2));
  releaser.join();
  EXPECT_EQ(s->synchronize(), ncclSuccess);
}

TEST(RuntimeHost, PingPongBetweenStreams) {
  auto rt = testRuntime();
  Buffers b = makeBuffers(*rt, 64);
  std::unique_ptr<Stream> a, c;
  ASSERT_EQ(rt->createStream(&a), ncclSuccess);
  ASSERT_EQ(rt->createStream(&c), ncclSuccess);
  constexpr uint64_t kRounds = 200;
  // Everything is enqueued up front; the two workers must interleave.
  for (uint64_t i = 1; i <= kRounds; ++i) {
    ASSERT_EQ(a->writeValue64(word(b, 0), i), ncclSuccess);
    ASSERT_EQ(a->waitValue64(word(b, 1), i, WaitCondition::Eq), ncclSuccess);
    ASSERT_EQ(c->waitValue64(word(b, 0), i, WaitCondition::Geq), ncclSuccess);
    ASSERT_EQ(c->writeValue64(word(b, 1), i), ncclSuccess);
  }
  EXPECT_EQ(a->synchronize(), ncclSuccess);
  EXPECT_EQ(c->synchronize(), ncclSuccess);
  EXPECT_EQ(loadAcquire(word(b, 1)), kRounds);
}

TEST(RuntimeHost, StickyErrorAfterWaitTimeout) {
  test::Rng rng(test::testSeed(), 3);
  auto rt = testRuntime(/*waitTimeoutMs=*/100);
  size_t bytes = 1000 + rng.below(5000);
  Buffers b = makeBuffers(*rt, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);
  std::unique_ptr<Stream> s, other;
  std::unique_ptr<Event> e;
  ASSERT_EQ(rt->createStream(&s), ncclSuccess);
  ASSERT_EQ(rt->createStream(&other), ncclSuccess);
  ASSERT_EQ(rt->createEvent(&e), ncclSuccess);

  ASSERT_EQ(s->waitValue64(word(b, 0), 1, WaitCondition::Eq), ncclSuccess);  // never released
  ASSERT_EQ(s->copyAsync(b.dst->ptr(), b.src->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(e->record(*s), ncclSuccess);
  ASSERT_EQ(other->waitEvent(*e), ncclSuccess);
  ASSERT_EQ(other->writeValue64(word(b, 1), 9), ncclSuccess);

  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s->synchronize(), ncclSystemError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // The copy behind the failed wait was skipped; the error sticks.
  EXPECT_EQ(static_cast<uint8_t*>(b.dst->ptr())[0], kPoison);
  EXPECT_EQ(s->query(), ncclSystemError);
  EXPECT_EQ(s->synchronize(), ncclSystemError);
  EXPECT_EQ(s->copyAsync(b.dst->ptr(), b.src->ptr(), bytes), ncclSystemError);
  EXPECT_EQ(e->query(), ncclSystemError);
  // A stream waiting on the failed stream's event fails too, never hangs.
  EXPECT_EQ(other->synchronize(), ncclSystemError);
  EXPECT_EQ(loadAcquire(word(b, 1)), 0u);
  // Bad arguments are refused at enqueue time, not made sticky.
  std::unique_ptr<Stream> fresh;
  ASSERT_EQ(rt->createStream(&fresh), ncclSuccess);
  EXPECT_EQ(fresh->copyAsync(nullptr, b.src->ptr(), 8), ncclInvalidArgument);
  EXPECT_EQ(
      fresh->writeValue64(reinterpret_cast<uint64_t*>(static_cast<char*>(b.flags->ptr()) + 3), 1),
      ncclInvalidArgument);
  EXPECT_EQ(fresh->synchronize(), ncclSuccess);
}

TEST(RuntimeHost, NullStreamIsSynchronous) {
  test::Rng rng(test::testSeed(), 4);
  auto rt = testRuntime(/*waitTimeoutMs=*/50);
  size_t bytes = 1 + rng.below(100000);
  Buffers b = makeBuffers(*rt, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);
  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt->wrapUserStream(nullptr, &s), ncclSuccess);
  EXPECT_EQ(s->nativeHandle(), nullptr);
  ASSERT_EQ(s->copyAsync(b.dst->ptr(), b.src->ptr(), bytes), ncclSuccess);
  EXPECT_EQ(firstMismatch(b.dst->ptr(), data), -1);  // done on return
  ASSERT_EQ(s->writeValue64(word(b, 0), 11), ncclSuccess);
  EXPECT_EQ(loadAcquire(word(b, 0)), 11u);
  EXPECT_EQ(s->waitValue64(word(b, 0), 11, WaitCondition::Eq), ncclSuccess);
  EXPECT_EQ(s->waitValue64(word(b, 0), 12, WaitCondition::Geq), ncclSystemError);  // times out
  std::unique_ptr<Event> e;
  ASSERT_EQ(rt->createEvent(&e), ncclSuccess);
  ASSERT_EQ(e->record(*s), ncclSuccess);
  EXPECT_EQ(e->query(), ncclSuccess);
  EXPECT_EQ(s->synchronize(), ncclSuccess);
  EXPECT_EQ(s->query(), ncclSuccess);
}

TEST(RuntimeHost, DeviceSelection) {
  auto rt = testRuntime(1000, /*devices=*/4, /*initialDevice=*/2);
  int count = 0;
  ASSERT_EQ(rt->deviceCount(&count), ncclSuccess);
  EXPECT_EQ(count, 4);
  std::thread([&] {
    int d = -1;
    EXPECT_EQ(rt->currentDevice(&d), ncclSuccess);
    EXPECT_EQ(d, 2);
    EXPECT_EQ(rt->setDevice(3), ncclSuccess);
    EXPECT_EQ(rt->currentDevice(&d), ncclSuccess);
    EXPECT_EQ(d, 3);
  }).join();
  std::thread([&] {  // per thread: the other thread's choice does not leak here
    int d = -1;
    EXPECT_EQ(rt->currentDevice(&d), ncclSuccess);
    EXPECT_EQ(d, 2);
    EXPECT_EQ(rt->setDevice(4), ncclInvalidArgument);
    EXPECT_EQ(rt->setDevice(-1), ncclInvalidArgument);
  })
      .join();
  std::string id;
  ASSERT_EQ(rt->pciBusId(1, &id), ncclSuccess);
  EXPECT_EQ(id, "host:1");
  EXPECT_EQ(rt->pciBusId(7, &id), ncclInvalidArgument);

  // Options from the environment: FERRY_HOST_DEVICES and LOCAL_RANK.
  setenv("FERRY_HOST_DEVICES", "3", 1);
  setenv("LOCAL_RANK", "7", 1);
  HostRuntimeOptions o = HostRuntimeOptions::fromParams(Params::load());
  unsetenv("FERRY_HOST_DEVICES");
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(o.deviceCount, 3);
  EXPECT_EQ(o.initialDevice, 1);
  HostRuntimeOptions d = HostRuntimeOptions::fromParams(Params::load());
  EXPECT_EQ(d.deviceCount, 8);
  EXPECT_EQ(d.initialDevice, 0);
}

TEST(RuntimeHost, ManyStreamsNoThreadLeakAndDrainOnDestroy) {
  test::Rng rng(test::testSeed(), 5);
  auto rt = testRuntime();
  int before = countTasks();
  ASSERT_GT(before, 0);
  constexpr int kStreams = 64;
  std::vector<std::unique_ptr<DeviceMemory>> src(kStreams), dst(kStreams);
  std::vector<std::vector<uint8_t>> data(kStreams);
  std::vector<std::unique_ptr<Stream>> streams(kStreams);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kStreams; ++i) {
      size_t bytes = 1 + rng.below(20000);
      data[i] = randomBytes(bytes, rng);
      ASSERT_EQ(rt->allocDevice(bytes, &src[i]), ncclSuccess);
      ASSERT_EQ(rt->allocDevice(bytes, &dst[i]), ncclSuccess);
      memcpy(src[i]->ptr(), data[i].data(), bytes);
      memset(dst[i]->ptr(), kPoison, bytes);
      ASSERT_EQ(rt->createStream(&streams[i]), ncclSuccess);
      ASSERT_EQ(streams[i]->copyAsync(dst[i]->ptr(), src[i]->ptr(), bytes), ncclSuccess);
    }
    EXPECT_EQ(countTasks(), before + kStreams);
    // Destroying without synchronizing: destruction drains the copy first.
    for (int i = 0; i < kStreams; ++i) {
      streams[i].reset();
      ASSERT_EQ(firstMismatch(dst[i]->ptr(), data[i]), -1) << "stream " << i;
    }
    EXPECT_EQ(countTasks(), before);
  }
}

std::atomic<int> gKernelRuns{0};

// A host "kernel": dst[i] = src[i] * mul + add, arguments by value.
void axpbKernel(void** args) {
  auto* dst = *static_cast<int64_t**>(args[0]);
  auto* src = *static_cast<const int64_t**>(args[1]);
  int64_t mul = *static_cast<int64_t*>(args[2]);
  int64_t add = *static_cast<int64_t*>(args[3]);
  size_t n = *static_cast<size_t*>(args[4]);
  for (size_t i = 0; i < n; ++i) dst[i] = src[i] * mul + add;
  gKernelRuns.fetch_add(1, std::memory_order_relaxed);
}

TEST(RuntimeHost, LaunchRunsInOrderWithArgumentSnapshot) {
  test::Rng rng(test::testSeed(), 6);
  auto rt = testRuntime();
  size_t n = 1000 + rng.below(10000);
  Buffers b = makeBuffers(*rt, n * sizeof(int64_t));
  std::vector<int64_t> in(n);
  for (auto& v : in) v = static_cast<int64_t>(rng.next() >> 20) - (1ll << 42);
  memcpy(b.src->ptr(), in.data(), n * sizeof(int64_t));
  int64_t mul = rng.range(2, 1000), add = rng.range(-100000, 100000);
  const int64_t wantMul = mul, wantAdd = add;

  std::unique_ptr<Stream> s;
  ASSERT_EQ(rt->createStream(&s), ncclSuccess);
  ASSERT_EQ(s->waitValue64(word(b, 0), 1, WaitCondition::Eq), ncclSuccess);
  void* dstPtr = b.mid->ptr();
  const void* srcPtr = b.src->ptr();
  void* args[] = {&dstPtr, &srcPtr, &mul, &add, &n};
  size_t sizes[] = {sizeof(dstPtr), sizeof(srcPtr), sizeof(mul), sizeof(add), sizeof(n)};
  KernelLaunch k;
  k.func = reinterpret_cast<const void*>(&axpbKernel);
  k.args = args;
  k.numArgs = 5;
  k.argSizes = sizes;
  int runsBefore = gKernelRuns.load();
  ASSERT_EQ(rt->launch(k, *s), ncclSuccess);
  ASSERT_EQ(s->copyAsync(b.dst->ptr(), b.mid->ptr(), n * sizeof(int64_t)), ncclSuccess);
  mul = 0;  // after launch: the kernel must still see the launch-time values
  add = 0;
  storeRelease(word(b, 0), 1);
  ASSERT_EQ(s->synchronize(), ncclSuccess);
  EXPECT_EQ(gKernelRuns.load(), runsBefore + 1);
  auto* out = static_cast<int64_t*>(b.dst->ptr());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], in[i] * wantMul + wantAdd) << "element " << i;
  }
  KernelLaunch bad;
  EXPECT_EQ(rt->launch(bad, *s), ncclInvalidArgument);
}

TEST(RuntimeHost, IpcInProcessSharesBytes) {
  test::Rng rng(test::testSeed(), 7);
  auto rt = testRuntime();
  size_t bytes = 1 + rng.below(3 << 20);
  std::unique_ptr<DeviceMemory> mem;
  ASSERT_EQ(rt->allocDevice(bytes, &mem), ncclSuccess);
  memset(mem->ptr(), kPoison, bytes);
  IpcDescriptor desc;
  ASSERT_EQ(rt->exportIpc(*mem, &desc), ncclSuccess);
  EXPECT_EQ(desc.type, IpcDescriptor::Type::HostMemfd);
  EXPECT_EQ(desc.size, bytes);
  ASSERT_GE(desc.fd, 0);
  std::unique_ptr<IpcMapping> map;
  ASSERT_EQ(rt->importIpc(desc, &map), ncclSuccess);
  EXPECT_EQ(desc.fd, -1);
  ASSERT_NE(map->ptr(), mem->ptr());  // a second mapping of the same bytes
  auto data = randomBytes(bytes, rng);
  memcpy(map->ptr(), data.data(), bytes);
  EXPECT_EQ(firstMismatch(mem->ptr(), data), -1);

  // A descriptor pointing past the allocation fails cleanly and closes its fd.
  IpcDescriptor bad;
  ASSERT_EQ(rt->exportIpc(*mem, &bad), ncclSuccess);
  bad.offset = 1ull << 40;
  int fd = bad.fd;
  EXPECT_EQ(rt->importIpc(bad, &map), ncclInvalidArgument);
  EXPECT_EQ(bad.fd, -1);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // closed
  IpcDescriptor none;
  EXPECT_EQ(rt->importIpc(none, &map), ncclInvalidArgument);
  std::unique_ptr<DeviceMemory> zero;
  EXPECT_EQ(rt->allocDevice(0, &zero), ncclInvalidArgument);
  std::unique_ptr<HostMemory> hm;
  ASSERT_EQ(rt->allocHost(1 + rng.below(1000), &hm), ncclSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(hm->ptr()) % 64, 0u);
}

TEST(RuntimeHost, WrapUserStreamFindsCreatedStreams) {
  test::Rng rng(test::testSeed(), 8);
  auto rt = testRuntime();
  size_t bytes = 1 + rng.below(50000);
  Buffers b = makeBuffers(*rt, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);
  std::unique_ptr<Stream> owner, alias;
  ASSERT_EQ(rt->createStream(&owner), ncclSuccess);
  void* handle = owner->nativeHandle();
  ASSERT_NE(handle, nullptr);
  ASSERT_EQ(rt->wrapUserStream(handle, &alias), ncclSuccess);
  EXPECT_EQ(alias->nativeHandle(), handle);
  // Same queue: work through the alias waits behind the owner's gate.
  ASSERT_EQ(owner->waitValue64(word(b, 0), 1, WaitCondition::Eq), ncclSuccess);
  ASSERT_EQ(alias->copyAsync(b.dst->ptr(), b.src->ptr(), bytes), ncclSuccess);
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(static_cast<uint8_t*>(b.dst->ptr())[0], kPoison);
  storeRelease(word(b, 0), 1);
  ASSERT_EQ(alias->synchronize(), ncclSuccess);
  EXPECT_EQ(firstMismatch(b.dst->ptr(), data), -1);
  alias.reset();  // not the owner: the stream lives on
  EXPECT_EQ(owner->copyAsync(b.mid->ptr(), b.src->ptr(), bytes), ncclSuccess);
  EXPECT_EQ(owner->synchronize(), ncclSuccess);

  std::unique_ptr<Stream> unknown;
  int local = 0;
  EXPECT_EQ(rt->wrapUserStream(&local, &unknown), ncclInvalidArgument);
  owner.reset();
  EXPECT_EQ(rt->wrapUserStream(handle, &unknown), ncclInvalidArgument);
}

TEST(RuntimeHost, UserStreamsByHandle) {
  Runtime* host = nullptr;
  ASSERT_EQ(selectRuntime("host", &host), ncclSuccess);
  test::Rng rng(test::testSeed(), 9);
  size_t bytes = 1 + rng.below(100000);
  Buffers b = makeBuffers(*host, bytes);
  auto data = randomBytes(bytes, rng);
  memcpy(b.src->ptr(), data.data(), bytes);
  void* handle = nullptr;
  ASSERT_EQ(userStreamCreate(*host, &handle), ncclSuccess);
  ASSERT_NE(handle, nullptr);
  std::unique_ptr<Stream> s;
  ASSERT_EQ(host->wrapUserStream(handle, &s), ncclSuccess);
  ASSERT_EQ(s->copyAsync(b.dst->ptr(), b.src->ptr(), bytes), ncclSuccess);
  ASSERT_EQ(userStreamSynchronize(handle), ncclSuccess);
  EXPECT_EQ(firstMismatch(b.dst->ptr(), data), -1);
  s.reset();
  EXPECT_EQ(userStreamDestroy(handle), ncclSuccess);
  EXPECT_EQ(userStreamDestroy(handle), ncclInvalidArgument);
  int local = 0;
  EXPECT_EQ(userStreamDestroy(&local), ncclInvalidArgument);
}

TEST(RuntimeHost, SelectAndGetRuntime) {
  Runtime* a = nullptr;
  Runtime* c = nullptr;
  ASSERT_EQ(getRuntime(RuntimeKind::Host, &a), ncclSuccess);
  ASSERT_EQ(selectRuntime("HOST", &c), ncclSuccess);
  EXPECT_EQ(a, c);  // one process-wide instance
  EXPECT_EQ(a->kind(), RuntimeKind::Host);
  EXPECT_STREQ(runtimeKindName(RuntimeKind::Host), "host");
  EXPECT_STREQ(runtimeKindName(RuntimeKind::Cuda), "cuda");
  EXPECT_EQ(selectRuntime("gpu", &c), ncclInvalidArgument);
  ASSERT_EQ(selectRuntime("auto", &c), ncclSuccess);
  if (!cudaBuilt()) {
    EXPECT_EQ(c->kind(), RuntimeKind::Host);
    EXPECT_EQ(selectRuntime("cuda", &c), ncclInvalidUsage);
    EXPECT_EQ(getRuntime(RuntimeKind::Cuda, &c), ncclInvalidUsage);
  } else {
    // Built with CUDA: auto is CUDA exactly when a device is visible.
    Runtime* cuda = nullptr;
    ASSERT_EQ(getRuntime(RuntimeKind::Cuda, &cuda), ncclSuccess);
    int n = 0;
    ASSERT_EQ(cuda->deviceCount(&n), ncclSuccess);
    EXPECT_EQ(c->kind(), n > 0 ? RuntimeKind::Cuda : RuntimeKind::Host);
  }
}

}  // namespace
}  // namespace ferry::rt
