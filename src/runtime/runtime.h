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

#include "core/fd.h"
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

// What describeAllocation reports about the allocation holding a range.
// `ipc` describes the WHOLE allocation (offset 0, size = the allocation's
// size); a peer maps it once with importIpc and adds (ptr - base) itself.
// Its fd is always -1: on the host runtime the memfd is fetched separately
// with exportAllocationFd(allocId) and travels by SCM_RIGHTS; CUDA legacy
// handles need none (the 64 handle bytes travel as data).
struct AllocationInfo {
  bool mappable = false;  // another process can map the allocation
  // Unique per allocation for the life of the process and never reused, even
  // when a later allocation gets the same address: a safe cache key for
  // exporters and (together with the peer's identity) for importers.
  uint64_t allocId = 0;
  uint64_t base = 0;  // address of the allocation's first byte, in this process
  uint64_t size = 0;  // bytes of the allocation
  IpcDescriptor ipc;  // valid when mappable
};

// A host range registered with the device (registerHost). Unregistered when
// destroyed; the memory itself stays the caller's. Destroy it only when no
// queued stream work or kernel still uses devicePtr().
class HostRegistration {
 public:
  virtual ~HostRegistration() = default;
  virtual void* hostPtr() const = 0;
  // The address streams (writeValue64, waitValue64, waitValue64Spin, copies)
  // and kernels must use for the range (host runtime: the same as hostPtr()).
  virtual void* devicePtr() const = 0;
  virtual size_t size() const = 0;
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
  // Asynchronous copy of `height` rows of `width` bytes, row r from
  // src + r * srcPitch to dst + r * dstPitch (cudaMemcpy2DAsync's contract:
  // width <= either pitch). Same directions as copyAsync.
  [[nodiscard]] virtual Status copyRowsAsync(void* dst, size_t dstPitch, const void* src,
                                             size_t srcPitch, size_t width, size_t height) = 0;
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
  // Later work waits until (int64_t)(*devAddr - value) >= 0 (Geq, cyclic, as
  // waitValue64) -- but, on CUDA, by a one-thread spinning kernel instead of
  // a stream memory operation. Why: under lazy module loading, while any
  // stream of the process sits in cuStreamWaitValue, the first launch of any
  // not-yet-loaded kernel blocks until that wait is released (measured; see
  // DESIGN.md); a spinning kernel does not cause this. Costs one SM slot (one
  // thread, napping with __nanosleep) for as long as it waits.
  // Ordering: the kernel reads the word with a system-scope acquire load, so
  // data that the releasing party wrote before the word (a copy, then
  // writeValue64 on another stream; or a CPU release store) is visible to
  // every operation after the wait on this stream.
  // The kernel gives up after kSpinWaitTimeoutSec and traps (the stream, and
  // the CUDA context, fail loudly instead of hanging forever); the owner of
  // the word releases waiters on abort by writing a value >= every target.
  // `devAddr`: device memory, or the devicePtr() of a HostRegistration /
  // allocHost memory. Host runtime: exactly waitValue64(devAddr, value, Geq).
  // Call Runtime::preloadKernels() before the first use (see there).
  [[nodiscard]] virtual Status waitValue64Spin(uint64_t* devAddr, uint64_t value) = 0;
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
  // Host runtime only: `func` is an `int (*)(void** args)` whose non-zero
  // result fails the stream (sticky ncclSystemError), as a trapping kernel
  // fails a CUDA stream. CUDA ignores it.
  bool hostReturnsStatus = false;
};

// Runtime::collKernel's function code for the kernel point-to-point kernel;
// its proto argument then picks the argument layout: kP2pSmallArgs for
// algo::P2pArgsSmall, anything else for algo::P2pArgs.
constexpr int kP2pKernelFn = -1;
constexpr int kP2pSmallArgs = 1;

// Longest waitValue64Spin's kernel spins before trapping (30 minutes: well
// past PyTorch's default 10-minute watchdog, which aborts first).
constexpr uint64_t kSpinWaitTimeoutSec = 30 * 60;

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
  // Maps a descriptor from exportIpc, or the whole-allocation one of
  // describeAllocation (offset 0; the caller adds its own offsets). Takes
  // ownership of desc.fd (closes it) whether or not it succeeds. CUDA legacy
  // handles: import each allocation once per process and cache the mapping
  // (by peer and allocId); never import a handle this process exported.
  [[nodiscard]] virtual Status importIpc(IpcDescriptor& desc, std::unique_ptr<IpcMapping>* out) = 0;

  [[nodiscard]] virtual Status createStream(std::unique_ptr<Stream>* out) = 0;
  // A non-blocking stream with a scheduling priority: 0 = default (what
  // createStream gives), any negative value = the device's highest priority
  // (e.g. for a proxy's copy streams). Positive values are invalid. The host
  // runtime has no priorities: the same as createStream.
  [[nodiscard]] virtual Status createStreamWithPriority(int priority,
                                                        std::unique_ptr<Stream>* out) = 0;
  [[nodiscard]] virtual Status createEvent(std::unique_ptr<Event>* out) = 0;
  [[nodiscard]] virtual Status launch(const KernelLaunch& k, Stream& stream) = 0;
  // The collective kernel for (algo::DataType, algo::CollFn, algo::CollProto)
  // and its block size (src/device/kernels.h); ncclInvalidUsage with a WARN when that
  // kernel was not built (FERRY_KERNEL_TYPES) or the runtime has no device
  // kernels (host runtime: the collective layer runs its own CPU executor).
  // fn == kP2pKernelFn asks for the kernel point-to-point kernel instead.
  [[nodiscard]] virtual Status collKernel(int dataType, int fn, int proto, const void** func,
                                          unsigned* threads) = 0;

  // Wraps a user's stream handle (not owned; destroying the wrapper does not
  // destroy the user's stream). Host runtime: handles of streams made by createStream
  // (e.g. through ncclFerryStreamCreate), or NULL for "synchronous"; any other
  // handle is ncclInvalidArgument. CUDA: any cudaStream_t, NULL = legacy stream.
  [[nodiscard]] virtual Status wrapUserStream(void* handle, std::unique_ptr<Stream>* out) = 0;

  // ---- SM-free point-to-point support ----

  // Registers [ptr, ptr + bytes) of host memory (e.g. a control block in
  // memfd shared memory that two processes map) so that streams and kernels
  // can read and write it: use (*out)->devicePtr() there, hostPtr() on CPUs.
  // Each process registers its own mapping of shared pages. CUDA:
  // cudaHostRegister(Portable | Mapped), so every device can use it; a range
  // overlapping (at page granularity) a range already registered in this
  // process is ncclInvalidUsage, so register a whole shared region once.
  // The host runtime checks the same overlap rule and returns ptr itself.
  [[nodiscard]] virtual Status registerHost(void* ptr, size_t bytes,
                                            std::unique_ptr<HostRegistration>* out) = 0;

  // Whether [ptr, ptr + bytes) (bytes 0: just ptr) lies inside one allocation
  // that another process can map, and that allocation's description. Not
  // mappable (mappable = false, success) for: plain host memory, pinned host
  // memory, managed memory, CUDA pool (cudaMallocAsync) and cuMem
  // allocations, IPC mappings of other processes' memory, and ranges that
  // straddle an allocation's end. Thread-safe and cheap on repeat (CUDA: one
  // cuPointerGetAttributes; the IPC handle is cached by allocation id, and an
  // id is never reused, so a cached handle is never stale). CUDA needs a
  // context current on the calling thread (any earlier runtime call made it).
  // Importing: peers call importIpc(info.ipc) (host runtime: with ipc.fd set
  // to a descriptor from exportAllocationFd) and add (ptr - base) themselves.
  // A CUDA legacy handle must never be imported by the process that exported
  // it (CUDA forbids it): same-process peers use the pointer directly.
  [[nodiscard]] virtual Status describeAllocation(const void* ptr, size_t bytes,
                                                  AllocationInfo* out) = 0;

  // Host runtime: a new descriptor (dup, close-on-exec) of the memfd of the
  // live allocation `allocId` (from describeAllocation), for SCM_RIGHTS;
  // ncclInvalidArgument (WARN) when no live allocation has that id. CUDA:
  // ncclInvalidUsage always (legacy handles travel as bytes).
  [[nodiscard]] virtual Status exportAllocationFd(uint64_t allocId, UniqueFd* out) = 0;

  // Whether the process loads kernels lazily (CUDA: cuModuleGetLoadingMode ==
  // CU_MODULE_LAZY_LOADING, i.e. CUDA_MODULE_LOADING=LAZY or the default of
  // CUDA >= 12.2). Host runtime: false. Initialises CUDA. If the mode cannot
  // be read, WARNs once and answers true (the cautious assumption).
  virtual bool lazyModuleLoading() = 0;

  // Loads every Ferry kernel (src/device/kernels.h) on the calling thread's
  // current device now, so that none is ever loaded lazily later -- a lazy
  // load can block behind a stream wait (see waitValue64Spin). Call once per
  // device used, at communicator init, before any stream waits. Idempotent.
  // Host runtime: nothing to load.
  [[nodiscard]] virtual Status preloadKernels() = 0;

  // Lets the current device access `peerDevice`'s memory (CUDA:
  // cudaDeviceEnablePeerAccess; already enabled is success). Idempotent.
  // Host runtime: checks the device number only.
  [[nodiscard]] virtual Status enablePeerAccess(int peerDevice) = 0;
  // Whether `device` can access `peerDevice`'s memory directly (CUDA:
  // cudaDeviceCanAccessPeer, false when the two are equal). Host runtime:
  // true for any two distinct valid devices, false for a device and itself.
  [[nodiscard]] virtual Status canAccessPeer(int device, int peerDevice, bool* out) = 0;
  // The device of this process with bus id `busId` (as pciBusId returns
  // it); ncclInvalidArgument when no visible device has it.
  [[nodiscard]] virtual Status deviceByBusId(const std::string& busId, int* device) = 0;
  // Whether [ptr, ptr+bytes) is memory this runtime's copies can read and
  // write without blocking the calling thread (CUDA: device, managed or
  // page-locked host memory; pageable host memory is refused because an
  // asynchronous copy from it may block the proxy thread). Host runtime: any.
  [[nodiscard]] virtual Status checkUserBuffer(const void* ptr, size_t bytes, bool* ok) = 0;
  // Whether a copyAsync between these two user buffers is queued without
  // blocking the calling thread (CUDA: both in device memory; a host-to-host
  // copy waits for the stream's earlier work). Host runtime: always.
  [[nodiscard]] virtual Status copyIsAsync(const void* dst, const void* src, bool* out) = 0;
  // Whether the user stream `handle` is being captured into a CUDA graph
  // (host runtime: never).
  [[nodiscard]] virtual Status isCapturing(void* handle, bool* out) = 0;
  // Sets this thread's stream-capture mode (CUDA's
  // cudaThreadExchangeStreamCaptureMode: 0 global, 1 thread-local, 2
  // relaxed) and returns the previous one. Setup that allocates or maps
  // memory while the user captures a graph (a first collective inside a
  // capture) runs relaxed, as CUDA otherwise refuses those calls. Host
  // runtime: no captures, returns `mode`.
  virtual int exchangeCaptureMode(int mode) = 0;
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
