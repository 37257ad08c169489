// Internals of the host runtime's streams and events (see host_runtime.h for
// the behaviour they emulate). Not for use outside runtime/host.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/runtime.h"

namespace ferry::rt::host {

using Clock = std::chrono::steady_clock;

// The queue and worker thread of one created stream. Shared (shared_ptr) by
// the owning HostStream, non-owning wrappers from wrapUserStream and events
// recorded on it, so that those stay safe to use after the owner is gone.
//
// Positions: every enqueued operation gets the next position 1, 2, ...;
// `completed` counts operations finished (or skipped after an error). An event
// records the position of the last operation enqueued before it.
class StreamCore {
 public:
  // Runs on the worker thread; a failure becomes the stream's sticky error.
  using Op = std::function<Status()>;

  // `device`: the emulated device current when the stream was created; a
  // stream belongs to it for life, as a CUDA stream does.
  StreamCore(int64_t waitTimeoutMs, int device);
  ~StreamCore();  // calls shutdown()
  // Starts the worker thread; ncclSystemError when the system refuses.
  [[nodiscard]] Status start();
  StreamCore(const StreamCore&) = delete;
  StreamCore& operator=(const StreamCore&) = delete;

  // Queues `op`. Returns the sticky error instead when the stream has failed,
  // ncclInvalidUsage after shutdown.
  [[nodiscard]] Status enqueue(Op op);
  // Position of the last operation enqueued so far.
  uint64_t lastPosition();
  // Whether every operation up to `position` is done: ncclSuccess, or
  // ncclInProgress, or the sticky error once the stream has failed.
  [[nodiscard]] Status reached(uint64_t position);
  // Blocks until `position` is reached, the stream fails (its error is
  // returned) or `deadline` passes (ncclSystemError, WARN naming `what`).
  [[nodiscard]] Status waitFor(uint64_t position, Clock::time_point deadline, const char* what);
  // Blocks until everything enqueued so far is done. Unbounded on purpose:
  // every operation is bounded (waits time out), so progress is guaranteed.
  [[nodiscard]] Status synchronize();
  [[nodiscard]] Status query();
  // Drains the queue and joins the worker; idempotent.
  void shutdown();

  int64_t waitTimeoutMs() const { return waitTimeoutMs_; }
  int device() const { return device_; }

 private:
  void run();

  const int64_t waitTimeoutMs_;
  const int device_;
  std::mutex mutex_;
  std::condition_variable workCv_;  // worker: new work or stop
  std::condition_variable doneCv_;  // waiters: progress or failure
  std::deque<Op> queue_;            // guarded by mutex_
  uint64_t enqueued_ = 0;           // guarded by mutex_
  uint64_t completed_ = 0;          // guarded by mutex_
  Status error_ = ncclSuccess;      // guarded by mutex_; sticky once set
  bool stopping_ = false;           // guarded by mutex_
  std::mutex joinMutex_;            // serializes shutdown() callers
  std::thread worker_;
};

// What a recorded event refers to: a point in a stream (core == null: a point
// that is complete already, e.g. recorded on the synchronous stream).
struct EventPoint {
  std::shared_ptr<StreamCore> core;
  uint64_t position = 0;
};

// An event belongs to the device current at its creation. As in CUDA,
// recording it on a stream of another device fails (invalid resource
// handle); waiting on it from any device's stream, querying and
// synchronizing it work from anywhere.
class HostEvent final : public Event {
 public:
  explicit HostEvent(int device) : device_(device) {}
  Status record(Stream& stream) override;
  Status query() override;
  Status synchronize() override;
  EventPoint point();

 private:
  const int device_;
  std::mutex mutex_;  // record and query may come from different threads
  EventPoint point_;
};

// Base of every host stream: how events and other streams reach its core.
class HostStreamBase : public Stream {
 public:
  // The core, or null for the synchronous (NULL-handle) stream.
  virtual std::shared_ptr<StreamCore> core() const = 0;
  // Runs `op` in stream order: queued on the worker, or inline when synchronous.
  [[nodiscard]] virtual Status submit(StreamCore::Op op) = 0;
  // Position of the last operation submitted so far (0 when synchronous).
  virtual uint64_t lastPosition() = 0;
  // The device the stream belongs to (the synchronous stream: the device
  // that was current when it was wrapped, as NULL means that device's
  // default stream in CUDA).
  virtual int device() const = 0;

  Status copyAsync(void* dst, const void* src, size_t bytes) override;
  Status copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                       size_t height) override;
  Status writeValue64(uint64_t* addr, uint64_t value) override;
  Status waitValue64(uint64_t* addr, uint64_t value, WaitCondition c) override;
  // No lazy loading to dodge here: exactly waitValue64(devAddr, value, Geq).
  Status waitValue64Spin(uint64_t* devAddr, uint64_t value) override {
    return waitValue64(devAddr, value, WaitCondition::Geq);
  }
  Status waitEvent(Event& event) override;

 protected:
  explicit HostStreamBase(int64_t waitTimeoutMs) : waitTimeoutMs_(waitTimeoutMs) {}
  const int64_t waitTimeoutMs_;
};

// A stream created by createStream: owns its core; registered by handle for
// wrapUserStream while alive. Destruction drains pending work.
[[nodiscard]] Status makeOwnedStream(int64_t waitTimeoutMs, int device,
                                     std::unique_ptr<Stream>* out);
// A non-owning wrapper of a created stream, found by its native handle.
// ncclInvalidArgument (WARN) for an unknown handle.
[[nodiscard]] Status wrapStreamHandle(void* handle, int64_t waitTimeoutMs,
                                      std::unique_ptr<Stream>* out);
// The synchronous stream: every operation runs inline in the caller.
std::unique_ptr<Stream> makeSyncStream(int64_t waitTimeoutMs, int device);

// Polls *addr (acquire loads) until `c` holds against `value` (Geq is the
// cyclic comparison (int64_t)(*addr - value) >= 0, as in CUDA), spinning
// briefly then sleeping with backoff (50us .. 1ms). ncclSystemError with a
// WARN when `timeoutMs` passes first.
[[nodiscard]] Status pollValue64(const uint64_t* addr, uint64_t value, WaitCondition c,
                                 int64_t timeoutMs);

}  // namespace ferry::rt::host
