// The runtime: the only layer that talks to a device (DESIGN.md layer 9).
//
// Two implementations of one interface: `cuda` (runtime/cuda, real GPUs) and
// `host` (runtime/host, a faithful emulation in host memory so every layer
// above runs in CI without a GPU). Code above this layer never calls CUDA.
//
// Handles are RAII objects returned as unique_ptr; destroying one releases the
// resource (memory, stream, event, IPC mapping). Streams, events and memory
// must be destroyed before the Runtime that made them.
//
// Threading: a Runtime and its objects may be used from several threads;
// a single Stream must not be used for enqueueing from two threads at once
// (the same rule CUDA has). Work enqueued on one stream runs in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace ferry::rt {

enum class RuntimeKind : int { Host = 0, Cuda = 1 };
const char* runtimeKindName(RuntimeKind kind);

class Stream;

// Device memory (or, on the host runtime, memfd-backed shared host memory).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* ptr() const = 0;
  virtual size_t size() const = 0;
};

// Page-locked host memory visible to the device (host runtime: plain memory).
class HostMemory {
 public:
  virtual ~HostMemory() = default;
  virtual void* ptr() const = 0;
  virtual size_t size() const = 0;
};

// What crosses a process boundary to share DeviceMemory. `fd` (when >= 0)
// must travel by SCM_RIGHTS over a Unix socket; the bytes travel as data.
// Nothing process-local (pointers, streams) is ever inside.
struct IpcDescriptor {
  enum class Type : uint32_t { None = 0, HostMemfd = 1, CudaLegacy = 2, CudaFd = 3 };
  Type type = Type::None;
  uint64_t size = 0;
  uint64_t offset = 0;  // of the exported pointer inside the shared allocation
  uint8_t bytes[64] = {0};
  int fd = -1;  // owned by the descriptor holder; close after import/transfer
};

// A mapping of a peer's DeviceMemory into this process.
class IpcMapping {
 public:
  virtual ~IpcMapping() = default;
  virtual void* ptr() const = 0;
  virtual size_t size() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // Captures all work enqueued on `stream` so far.
  [[nodiscard]] virtual Status record(Stream& stream) = 0;
  // ncclSuccess when complete, ncclInProgress when not, an error otherwise.
  [[nodiscard]] virtual Status query() = 0;
  [[nodiscard]] virtual Status synchronize() = 0;
};

enum class WaitCondition : int { Geq = 0, Eq = 1 };

// Destruction: CUDA returns at once and lets queued work finish in the
// background; the host runtime drains queued work before returning. Either
// way, memory used by queued work must outlive it. A wrapper from
// wrapUserStream never destroys the underlying stream.
class Stream {
 public:
  virtual ~Stream() = default;
  // Asynchronous byte copy (any direction the runtime supports, including
  // to/from IPC-mapped peer memory).
  [[nodiscard]] virtual Status copyAsync(void* dst, const void* src, size_t bytes) = 0;
  // Writes `value` to the 64-bit word at `addr` once prior work is done.
  // Ordering: the write is visible to host readers only after every prior
  // operation on the stream has completed (release semantics); readers load
  // the word with acquire semantics. `addr` must be 8-byte aligned and, on
  // CUDA, device-accessible: device memory or mapped pinned host memory
  // (allocHost), never plain malloc'd memory.
  [[nodiscard]] virtual Status writeValue64(uint64_t* addr, uint64_t value) = 0;
  // Later work on the stream waits until *addr satisfies the condition. Geq
  // is CUDA's cyclic comparison: (int64_t)(*addr - value) >= 0. Same address
  // rules as writeValue64. Host runtime: a wait that lasts longer than its
  // timeout fails the stream (sticky ncclSystemError) instead of hanging.
  [[nodiscard]] virtual Status waitValue64(uint64_t* addr, uint64_t value, WaitCondition c) = 0;
  // Later work waits for `event`.
  [[nodiscard]] virtual Status waitEvent(Event& event) = 0;
  // Waits for all enqueued work; returns the stream's (sticky) error if any
  // operation failed. Bounded: fails rather than waiting forever.
  [[nodiscard]] virtual Status synchronize() = 0;
  // ncclSuccess when idle, ncclInProgress when busy, or the sticky error.
  [[nodiscard]] virtual Status query() = 0;
  // Opaque handle as users see it (cudaStream_t), for API-level matching.
  virtual void* nativeHandle() const = 0;
};

// A kernel launch. On CUDA `func` is a __global__ function; on the host runtime
// it is a `void (*)(void** args)` run by the stream's worker in order.
//
// Argument lifetime: CUDA copies the argument values at launch. The host
// runtime does the same when `argSizes` describes them (numArgs entries, the
// size of what args[i] points to); without argSizes it passes `args` through
// as given, so the array and what it points to must then stay valid until the
// launch has run (e.g. until the stream is synchronized). CUDA ignores both.
struct KernelLaunch {
  const void* func = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  size_t sharedBytes = 0;
  void** args = nullptr;
  int numArgs = 0;
  const size_t* argSizes = nullptr;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual RuntimeKind kind() const = 0;

  [[nodiscard]] virtual Status deviceCount(int* count) = 0;
  // The calling thread's current device (CUDA: cudaGetDevice).
  [[nodiscard]] virtual Status currentDevice(int* device) = 0;
  [[nodiscard]] virtual Status setDevice(int device) = 0;
  // A stable identifier of the device, e.g. "0000:1b:00.0" (host: "host:<n>").
  [[nodiscard]] virtual Status pciBusId(int device, std::string* busId) = 0;

  [[nodiscard]] virtual Status allocDevice(size_t bytes, std::unique_ptr<DeviceMemory>* out) = 0;
  [[nodiscard]] virtual Status allocHost(size_t bytes, std::unique_ptr<HostMemory>* out) = 0;
  [[nodiscard]] virtual Status exportIpc(const DeviceMemory& mem, IpcDescriptor* out) = 0;
  // Takes ownership of desc.fd (closes it) whether or not it succeeds.
  [[nodiscard]] virtual Status importIpc(IpcDescriptor& desc, std::unique_ptr<IpcMapping>* out) = 0;

  [[nodiscard]] virtual Status createStream(std::unique_ptr<Stream>* out) = 0;
  [[nodiscard]] virtual Status createEvent(std::unique_ptr<Event>* out) = 0;
  [[nodiscard]] virtual Status launch(const KernelLaunch& k, Stream& stream) = 0;

  // Wraps a user's stream handle (not owned; destroying the wrapper does not
  // destroy the user's stream). Host runtime: handles of streams made by createStream
  // (e.g. through ncclFerryStreamCreate), or NULL for "synchronous"; any other
  // handle is ncclInvalidArgument. CUDA: any cudaStream_t, NULL = legacy stream.
  [[nodiscard]] virtual Status wrapUserStream(void* handle, std::unique_ptr<Stream>* out) = 0;
};

// The process-wide runtime of each kind, created on first use (never freed:
// CUDA forbids teardown from static destructors).
[[nodiscard]] Status getRuntime(RuntimeKind kind, Runtime** out);
// Resolves FERRY_RUNTIME=auto|cuda|host: CUDA when built with it and a device
// is visible; otherwise host. An explicit "cuda" without a GPU is an error.
[[nodiscard]] Status selectRuntime(const std::string& choice, Runtime** out);
// Whether this build contains the CUDA runtime.
bool cudaBuilt();

}  // namespace ferry::rt
