#include "runtime/host/host_stream.h"

#include <string.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <unordered_map>

#include "core/cpu_relax.h"

namespace ferry::rt::host {
namespace {

// Native handle -> core of every live created stream, so wrapUserStream can
// find a stream from the cudaStream_t-like handle a user passes back.
// Process-wide and never destroyed: streams may outlive static destruction.
struct StreamRegistry {
  std::mutex mutex;
  std::unordered_map<void*, std::weak_ptr<StreamCore>> cores;
};

StreamRegistry& registry() {
  static StreamRegistry* instance = new StreamRegistry();
  return *instance;
}

bool conditionHolds(uint64_t current, uint64_t value, WaitCondition c) {
  // Geq is cyclic like CUDA's: counters that wrap still compare correctly.
  if (c == WaitCondition::Geq) return static_cast<int64_t>(current - value) >= 0;
  return current == value;
}

}  // namespace

// ---- StreamCore ---------------------------------------------------------------

StreamCore::StreamCore(int64_t waitTimeoutMs, int device)
    : waitTimeoutMs_(waitTimeoutMs), device_(device) {}

StreamCore::~StreamCore() {
  shutdown();
}

Status StreamCore::start() {
  try {
    worker_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    FERRY_FAIL(ncclSystemError, "host stream: cannot start worker thread: %s", e.what());
  }
  return ncclSuccess;
}

Status StreamCore::enqueue(Op op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) FERRY_FAIL(ncclInvalidUsage, "host stream: enqueue on a destroyed stream");
    if (error_ != ncclSuccess) {
      FERRY_INFO(kLogCall, "host stream: enqueue refused, stream failed earlier: %s",
                 statusString(error_));
      return error_;
    }
    queue_.push_back(std::move(op));
    ++enqueued_;
  }
  workCv_.notify_one();
  return ncclSuccess;
}

uint64_t StreamCore::lastPosition() {
  std::lock_guard<std::mutex> lock(mutex_);
  return enqueued_;
}

Status StreamCore::reached(uint64_t position) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_ != ncclSuccess) return error_;
  return completed_ >= position ? ncclSuccess : ncclInProgress;
}

Status StreamCore::waitFor(uint64_t position, Clock::time_point deadline, const char* what) {
  // Sliced waits keep the arithmetic safe for an unbounded (max) deadline.
  constexpr auto kSlice = std::chrono::milliseconds(100);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (error_ != ncclSuccess) return error_;
    if (completed_ >= position) return ncclSuccess;
    auto now = Clock::now();
    if (now >= deadline) {
      FERRY_FAIL(ncclSystemError, "host stream: %s timed out at %lu of %lu operations", what,
                 static_cast<unsigned long>(completed_), static_cast<unsigned long>(position));
    }
    doneCv_.wait_for(lock, std::min<Clock::duration>(deadline - now, kSlice));
  }
}

Status StreamCore::synchronize() {
  return waitFor(lastPosition(), Clock::time_point::max(), "synchronize");
}

Status StreamCore::query() {
  return reached(lastPosition());
}

void StreamCore::shutdown() {
  std::lock_guard<std::mutex> joinLock(joinMutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  workCv_.notify_all();
  if (!worker_.joinable()) return;
  if (worker_.get_id() == std::this_thread::get_id()) {
    // The last reference was dropped by one of our own operations; the loop
    // exits by itself once the queue is empty.
    worker_.detach();
    return;
  }
  worker_.join();
}

void StreamCore::run() {
  for (;;) {
    Op op;
    bool skip = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      workCv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping, and drained
      op = std::move(queue_.front());
      queue_.pop_front();
      skip = error_ != ncclSuccess;  // after a failure, later work is skipped
    }
    Status s = skip ? ncclSuccess : op();
    op = nullptr;  // drop captured state before reporting completion
    {
      // The mutex publishes everything `op` wrote (copies, stores) to any
      // thread that later observes completed_ under the same mutex.
      std::lock_guard<std::mutex> lock(mutex_);
      if (s != ncclSuccess && error_ == ncclSuccess) error_ = s;
      ++completed_;
    }
    doneCv_.notify_all();
  }
}

// ---- polling ------------------------------------------------------------------

Status pollValue64(const uint64_t* addr, uint64_t value, WaitCondition c, int64_t timeoutMs) {
  // atomic_ref needs a non-const object; we only load through it.
  std::atomic_ref<uint64_t> word(*const_cast<uint64_t*>(addr));
  // Acquire: pairs with the writer's release store, so data written before
  // the flag is visible to the operations that follow this wait.
  for (int i = 0; i < 2000; ++i) {
    if (conditionHolds(word.load(std::memory_order_acquire), value, c)) return ncclSuccess;
    cpuRelax();
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    uint64_t current = word.load(std::memory_order_acquire);
    if (conditionHolds(current, value, c)) return ncclSuccess;
    if (Clock::now() >= deadline) {
      FERRY_FAIL(ncclSystemError,
                 "host stream: waitValue64(%p %s %lu) timed out after %ld ms (value %lu)",
                 static_cast<const void*>(addr),
                 c == WaitCondition::Geq ? ">=" : "==", static_cast<unsigned long>(value),
                 static_cast<long>(timeoutMs), static_cast<unsigned long>(current));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(1000));
  }
}

// ---- events -------------------------------------------------------------------

Status HostEvent::record(Stream& stream) {
  auto* host = dynamic_cast<HostStreamBase*>(&stream);
  if (host == nullptr) FERRY_FAIL(ncclInvalidArgument, "host event: record on a foreign stream");
  if (host->device() != device_) {
    FERRY_FAIL(ncclUnhandledCudaError,
               "host runtime: event of device %d recorded on a stream of device %d (CUDA: "
               "invalid resource handle; make the event with the stream's device current)",
               device_, host->device());
  }
  EventPoint p{host->core(), host->lastPosition()};
  std::lock_guard<std::mutex> lock(mutex_);
  point_ = std::move(p);
  return ncclSuccess;
}

EventPoint HostEvent::point() {
  std::lock_guard<std::mutex> lock(mutex_);
  return point_;
}

Status HostEvent::query() {
  EventPoint p = point();
  return p.core ? p.core->reached(p.position) : ncclSuccess;
}

Status HostEvent::synchronize() {
  EventPoint p = point();
  if (!p.core) return ncclSuccess;
  return p.core->waitFor(p.position, Clock::time_point::max(), "event synchronize");
}

// ---- operations common to every host stream -----------------------------------

Status HostStreamBase::copyAsync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (dst == nullptr || src == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "copyAsync: null pointer (dst %p, src %p, %zu bytes)", dst, src,
               bytes);
  }
  return submit([dst, src, bytes] {
    memmove(dst, src, bytes);
    return ncclSuccess;
  });
}

Status HostStreamBase::copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch,
                                     size_t width, size_t height) {
  if (width == 0 || height == 0) return ncclSuccess;
  if (dst == nullptr || src == nullptr || width > dstPitch || width > srcPitch) {
    FERRY_FAIL(ncclInvalidArgument,
               "copyRowsAsync: bad arguments (dst %p pitch %zu, src %p pitch %zu, %zu x %zu)", dst,
               dstPitch, src, srcPitch, width, height);
  }
  return submit([=] {
    for (size_t r = 0; r < height; ++r) {
      memmove(static_cast<char*>(dst) + r * dstPitch, static_cast<const char*>(src) + r * srcPitch,
              width);
    }
    return ncclSuccess;
  });
}

Status HostStreamBase::writeValue64(uint64_t* addr, uint64_t value) {
  if (addr == nullptr || reinterpret_cast<uintptr_t>(addr) % alignof(uint64_t) != 0) {
    FERRY_FAIL(ncclInvalidArgument, "writeValue64: bad address %p", static_cast<void*>(addr));
  }
  return submit([addr, value] {
    // Release: publishes every earlier operation of this stream (they ran
    // before us on this thread) to whoever acquires the word: host pollers
    // and other streams' waitValue64, in this or another process.
    std::atomic_ref<uint64_t>(*addr).store(value, std::memory_order_release);
    return ncclSuccess;
  });
}

Status HostStreamBase::waitValue64(uint64_t* addr, uint64_t value, WaitCondition c) {
  if (addr == nullptr || reinterpret_cast<uintptr_t>(addr) % alignof(uint64_t) != 0) {
    FERRY_FAIL(ncclInvalidArgument, "waitValue64: bad address %p", static_cast<void*>(addr));
  }
  int64_t timeoutMs = waitTimeoutMs_;
  return submit([addr, value, c, timeoutMs] { return pollValue64(addr, value, c, timeoutMs); });
}

Status HostStreamBase::waitEvent(Event& event) {
  auto* host = dynamic_cast<HostEvent*>(&event);
  if (host == nullptr) FERRY_FAIL(ncclInvalidArgument, "waitEvent: foreign event");
  EventPoint p = host->point();
  // Never recorded, or recorded on this very stream: order already holds.
  if (!p.core || p.core == core()) return ncclSuccess;
  int64_t timeoutMs = waitTimeoutMs_;
  return submit([p, timeoutMs] {
    // The deadline starts when the wait starts, not when it was enqueued.
    return p.core->waitFor(p.position, Clock::now() + std::chrono::milliseconds(timeoutMs),
                           "waitEvent");
  });
}

// ---- the three kinds of host stream -------------------------------------------

namespace {

// A created stream (owner) or a wrapper of one found by handle (not owner).
class QueuedStream final : public HostStreamBase {
 public:
  QueuedStream(std::shared_ptr<StreamCore> core, bool owner, int64_t waitTimeoutMs)
      : HostStreamBase(waitTimeoutMs), core_(std::move(core)), owner_(owner) {}

  ~QueuedStream() override {
    if (!owner_) return;
    {
      std::lock_guard<std::mutex> lock(registry().mutex);
      registry().cores.erase(core_.get());
    }
    // Drains pending work, then joins the worker (documented in runtime.h).
    core_->shutdown();
  }

  std::shared_ptr<StreamCore> core() const override { return core_; }
  Status submit(StreamCore::Op op) override { return core_->enqueue(std::move(op)); }
  uint64_t lastPosition() override { return core_->lastPosition(); }
  int device() const override { return core_->device(); }
  Status synchronize() override { return core_->synchronize(); }
  Status query() override { return core_->query(); }
  // The core's address: unique while the stream lives, stable, never null.
  void* nativeHandle() const override { return core_.get(); }

 private:
  std::shared_ptr<StreamCore> core_;
  bool owner_;
};

class SyncStream final : public HostStreamBase {
 public:
  SyncStream(int64_t waitTimeoutMs, int device) : HostStreamBase(waitTimeoutMs), device_(device) {}
  std::shared_ptr<StreamCore> core() const override { return nullptr; }
  // Inline: the caller observes the operation's effects (and error) on return.
  Status submit(StreamCore::Op op) override { return op(); }
  uint64_t lastPosition() override { return 0; }
  int device() const override { return device_; }
  Status synchronize() override { return ncclSuccess; }
  Status query() override { return ncclSuccess; }
  void* nativeHandle() const override { return nullptr; }

 private:
  const int device_;
};

}  // namespace

Status makeOwnedStream(int64_t waitTimeoutMs, int device, std::unique_ptr<Stream>* out) {
  auto core = std::make_shared<StreamCore>(waitTimeoutMs, device);
  FERRY_CHECK(core->start());
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().cores[core.get()] = core;
  }
  *out = std::make_unique<QueuedStream>(std::move(core), /*owner=*/true, waitTimeoutMs);
  return ncclSuccess;
}

Status wrapStreamHandle(void* handle, int64_t waitTimeoutMs, std::unique_ptr<Stream>* out) {
  std::shared_ptr<StreamCore> core;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    auto it = registry().cores.find(handle);
    if (it != registry().cores.end()) core = it->second.lock();
  }
  if (!core) {
    FERRY_FAIL(ncclInvalidArgument,
               "host runtime: stream %p is not a live stream of this process (create streams "
               "with ncclFerryStreamCreate, or pass NULL)",
               handle);
  }
  *out = std::make_unique<QueuedStream>(std::move(core), /*owner=*/false, waitTimeoutMs);
  return ncclSuccess;
}

std::unique_ptr<Stream> makeSyncStream(int64_t waitTimeoutMs, int device) {
  return std::make_unique<SyncStream>(waitTimeoutMs, device);
}

}  // namespace ferry::rt::host
