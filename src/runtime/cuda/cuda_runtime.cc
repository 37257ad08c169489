// The top-level CMake glob (GLOB_RECURSE src/runtime/*.cc) also picks up this
// folder in builds without CUDA; the guard keeps such builds free of CUDA.
#ifdef FERRY_WITH_CUDA

#include "runtime/cuda/cuda_runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <map>
#include <array>
#include <thread>

#include "core/fd.h"
#include "core/params.h"
#include "runtime/cuda/cuda_driver.h"
#include "device/kernels.h"
#include "runtime/cuda/cuda_sm_free.h"

namespace ferry::rt {
namespace {

using cuda::DriverApi;
using cuda::driverApi;
using Clock = std::chrono::steady_clock;

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(IpcDescriptor::bytes),
              "IpcDescriptor::bytes must hold a legacy CUDA IPC handle");

// Longest a host thread waits in Event/Stream::synchronize before failing
// (the GPU may be stuck on a stream wait that nobody will release).
constexpr int64_t kSyncTimeoutMs = 600 * 1000;

// Polls `isReady` (cudaSuccess = done, cudaErrorNotReady = not yet) instead of
// blocking in cudaStreamSynchronize, so the wait is bounded: a short spin for
// latency, then naps growing from 20us to 500us.
template <typename Query>
Status pollUntilReady(Query isReady, const char* what) {
  auto start = Clock::now();
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    cudaError_t e = isReady();
    if (e == cudaSuccess) return ncclSuccess;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      FERRY_FAIL(ncclUnhandledCudaError, "CUDA call %s failed: %s (%d)", what,
                 cudaGetErrorString(e), static_cast<int>(e));
    }
    auto waited = Clock::now() - start;
    if (waited > std::chrono::milliseconds(kSyncTimeoutMs)) {
      FERRY_FAIL(ncclSystemError, "%s: not complete after %ld ms", what,
                 static_cast<long>(kSyncTimeoutMs));
    }
    if (waited < std::chrono::microseconds(50)) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(500));
  }
}

Status queryStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ncclSuccess;
  if (e == cudaErrorNotReady) return ncclInProgress;
  (void)cudaGetLastError();
  FERRY_FAIL(ncclUnhandledCudaError, "CUDA call %s failed: %s (%d)", what, cudaGetErrorString(e),
             static_cast<int>(e));
}

class CudaDeviceMemory final : public DeviceMemory {
 public:
  CudaDeviceMemory(void* p, size_t size) : p_(p), size_(size) {}
  ~CudaDeviceMemory() override { (void)cudaFree(p_); }
  void* ptr() const override { return p_; }
  size_t size() const override { return size_; }

 private:
  void* p_;
  size_t size_;
};

class CudaHostMemory final : public HostMemory {
 public:
  CudaHostMemory(void* p, size_t size) : p_(p), size_(size) {}
  ~CudaHostMemory() override { (void)cudaFreeHost(p_); }
  void* ptr() const override { return p_; }
  size_t size() const override { return size_; }

 private:
  void* p_;
  size_t size_;
};

// Pinned host memory made of 2 MiB pages: an anonymous mapping asked for
// transparent huge pages, its pages faulted in, then registered with CUDA
// (bench/pin_cost.cu, session 48, an H200 host: 192 MiB pinned in 37-45 ms
// against 85-105 ms with cudaHostAlloc, freed in ~4 ms against 22-31 ms,
// device -> host copies into it as fast or faster). A block is pinned by
// the thread that needs it, inside the user's call (staging across hosts,
// transport/net_buffers.cc), so this is CPU time taken from the caller.
class CudaHugeHostMemory final : public HostMemory {
 public:
  CudaHugeHostMemory(void* p, size_t mapped, size_t size) : p_(p), mapped_(mapped), size_(size) {}
  ~CudaHugeHostMemory() override {
    (void)cudaHostUnregister(p_);
    (void)cudaGetLastError();
    munmap(p_, mapped_);
  }
  void* ptr() const override { return p_; }
  size_t size() const override { return size_; }

 private:
  void* p_;
  size_t mapped_;
  size_t size_;
};

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeHostMinBytes = size_t{4} << 20;

// FERRY_HOST_HUGE_PAGES is 1 and the kernel grants huge pages on request
// ("always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled).
bool hugeHostPagesWanted() {
  static const bool wanted = [] {
    if (!Params::load().getBool(ParamId::HostHugePages)) return false;
    char mode[128] = {0};
    FILE* f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == nullptr) return false;
    const bool read = fgets(mode, sizeof mode, f) != nullptr;
    fclose(f);
    mode[strcspn(mode, "\n")] = '\0';
    const bool granted = read && strstr(mode, "[never]") == nullptr;
    FERRY_INFO(kLogInit | kLogAlloc, "pinned host blocks >= 4 MiB: %s (transparent_hugepage: %s)",
               granted ? "2 MiB pages, registered" : "cudaHostAlloc", read ? mode : "unknown");
    return granted;
  }();
  return wanted;
}

// The huge-page block of `bytes`, or null (nothing held) when the kernel or
// the driver refuses it: the caller then uses cudaHostAlloc.
std::unique_ptr<HostMemory> allocHugeHost(size_t bytes) {
  // Callers use a block's host address on the GPU too (copies, stream
  // memory operations, kernels reading ring mirrors), as with cudaHostAlloc
  // under unified addressing; registered memory allows that only where the
  // device says so (true on Linux x86-64 with current GPUs).
  int device = 0, hostPointerOk = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&hostPointerOk, cudaDevAttrCanUseHostPointerForRegisteredMem,
                             device) != cudaSuccess ||
      hostPointerOk == 0) {
    (void)cudaGetLastError();
    return nullptr;
  }
  const size_t len = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // One huge page more than needed, so that an aligned run of `len` fits;
  // the ends outside it are unmapped at once.
  void* map =
      mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(map);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(map, aligned - start);
  const uintptr_t tail = start + len + kHugePage - (aligned + len);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + len), tail);
  auto* p = reinterpret_cast<char*>(aligned);
  // A refused hint only costs the speed-up (4 KiB pages).
  (void)madvise(p, len, MADV_HUGEPAGE);
  // A child the user forks (torch's DataLoader workers) must not share these
  // pages copy-on-write: the parent's next write would move its page away
  // from the one the GPU reads and writes. The child gets no mapping.
  if (madvise(p, len, MADV_DONTFORK) != 0) {
    munmap(p, len);
    return nullptr;
  }
  // One write per 4 KiB faults every page in (a huge page at its first)
  // before the driver pins them.
  for (size_t off = 0; off < len; off += 4096) p[off] = 0;
  cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    munmap(p, len);
    FERRY_INFO(kLogAlloc,
               "cuda runtime: registering %zu bytes of huge pages failed (%s); "
               "cudaHostAlloc instead",
               len, cudaGetErrorString(e));
    return nullptr;
  }
  return std::make_unique<CudaHugeHostMemory>(p, len, bytes);
}

// One opened legacy IPC handle. CUDA lets a process open a given handle only
// once ("already mapped" otherwise), so every importer of the same handle in
// this process shares one OpenHandle, closed when the last mapping goes.
struct OpenHandle {
  void* base = nullptr;
  ~OpenHandle() {
    if (base != nullptr) (void)cudaIpcCloseMemHandle(base);
  }
};

struct OpenHandleTable {
  std::mutex mu;
  std::map<std::array<uint8_t, 64>, std::weak_ptr<OpenHandle>> open;
};
OpenHandleTable& openHandles() {
  static auto* t = new OpenHandleTable();  // leaked: mappings may outlive static destruction
  return *t;
}

class CudaIpcMapping final : public IpcMapping {
 public:
  CudaIpcMapping(std::shared_ptr<OpenHandle> handle, size_t offset, size_t size)
      : handle_(std::move(handle)), offset_(offset), size_(size) {}
  void* ptr() const override { return static_cast<char*>(handle_->base) + offset_; }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<OpenHandle> handle_;
  size_t offset_;
  size_t size_;
};

// Opens `handle` or shares this process's existing opening of it.
Status openShared(const uint8_t (&bytes)[64], std::shared_ptr<OpenHandle>* out) {
  std::array<uint8_t, 64> key;
  std::copy(bytes, bytes + 64, key.begin());
  OpenHandleTable& t = openHandles();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.open.find(key);
  if (it != t.open.end()) {
    if ((*out = it->second.lock())) return ncclSuccess;
  }
  cudaIpcMemHandle_t handle;
  memcpy(&handle, bytes, sizeof(handle));
  auto opened = std::make_shared<OpenHandle>();
  cudaError_t e = cudaIpcOpenMemHandle(&opened->base, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    opened->base = nullptr;
    (void)cudaGetLastError();
    // The usual misuses: a handle this very process exported (CUDA refuses
    // it; same-process peers must use the pointer), or a freed allocation.
    FERRY_FAIL(ncclUnhandledCudaError,
               "CUDA call cudaIpcOpenMemHandle failed: %s (%d); the exporter must be another "
               "process, and the allocation must still be alive",
               cudaGetErrorString(e), static_cast<int>(e));
  }
  t.open[key] = opened;
  *out = std::move(opened);
  return ncclSuccess;
}

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(cudaEvent_t e) : event_(e) {}
  ~CudaEvent() override { (void)cudaEventDestroy(event_); }
  Status record(Stream& stream) override {
    FERRY_CUDA_TRY(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.nativeHandle())));
    return ncclSuccess;
  }
  Status query() override { return queryStatus(cudaEventQuery(event_), "cudaEventQuery"); }
  Status synchronize() override {
    return pollUntilReady([this] { return cudaEventQuery(event_); }, "event synchronize");
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
};

class CudaStream final : public Stream {
 public:
  CudaStream(cudaStream_t s, bool owner) : stream_(s), owner_(owner) {}
  ~CudaStream() override {
    // Returns at once; CUDA finishes pending work in the background.
    if (owner_) (void)cudaStreamDestroy(stream_);
  }

  Status copyAsync(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return ncclSuccess;
    FERRY_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    return ncclSuccess;
  }

  Status copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                       size_t height) override {
    if (width == 0 || height == 0) return ncclSuccess;
    FERRY_CUDA_TRY(
        cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height, cudaMemcpyDefault, stream_));
    return ncclSuccess;
  }

  Status writeValue64(uint64_t* addr, uint64_t value) override {
    const DriverApi* api = nullptr;
    FERRY_CHECK(driverApi(&api));
    // DEFAULT (not NO_MEMORY_BARRIER): the driver fences prior work before the
    // write, which gives the release semantics runtime.h promises.
    FERRY_CU_TRY(api->streamWriteValue64(stream(), reinterpret_cast<CUdeviceptr>(addr), value,
                                         CU_STREAM_WRITE_VALUE_DEFAULT));
    return ncclSuccess;
  }

  Status waitValue64(uint64_t* addr, uint64_t value, WaitCondition c) override {
    const DriverApi* api = nullptr;
    FERRY_CHECK(driverApi(&api));
    unsigned flags = c == WaitCondition::Geq ? CU_STREAM_WAIT_VALUE_GEQ : CU_STREAM_WAIT_VALUE_EQ;
    FERRY_CU_TRY(
        api->streamWaitValue64(stream(), reinterpret_cast<CUdeviceptr>(addr), value, flags));
    return ncclSuccess;
  }

  Status waitValue64Spin(uint64_t* devAddr, uint64_t value) override {
    return cuda::launchWaitGeq(stream_, devAddr, value);
  }

  Status waitEvent(Event& event) override {
    auto* e = dynamic_cast<CudaEvent*>(&event);
    if (e == nullptr) FERRY_FAIL(ncclInvalidArgument, "waitEvent: not a CUDA event");
    FERRY_CUDA_TRY(cudaStreamWaitEvent(stream_, e->get(), 0));
    return ncclSuccess;
  }

  Status synchronize() override {
    return pollUntilReady([this] { return cudaStreamQuery(stream_); }, "stream synchronize");
  }
  Status query() override { return queryStatus(cudaStreamQuery(stream_), "cudaStreamQuery"); }
  void* nativeHandle() const override { return stream_; }

 private:
  CUstream stream() const { return reinterpret_cast<CUstream>(stream_); }
  cudaStream_t stream_;
  bool owner_;
};

class CudaRuntime final : public Runtime {
 public:
  RuntimeKind kind() const override { return RuntimeKind::Cuda; }
  Status deviceCount(int* count) override;

  Status currentDevice(int* device) override {
    if (device == nullptr) FERRY_FAIL(ncclInvalidArgument, "currentDevice: null output");
    FERRY_CUDA_TRY(cudaGetDevice(device));
    return ncclSuccess;
  }
  Status setDevice(int device) override {
    FERRY_CUDA_TRY(cudaSetDevice(device));
    return ncclSuccess;
  }
  Status pciBusId(int device, std::string* busId) override;

  Status allocDevice(size_t bytes, std::unique_ptr<DeviceMemory>* out) override {
    if (bytes == 0 || out == nullptr) FERRY_FAIL(ncclInvalidArgument, "allocDevice: bad args");
    void* p = nullptr;
    FERRY_CUDA_TRY(cudaMalloc(&p, bytes));
    *out = std::make_unique<CudaDeviceMemory>(p, bytes);
    FERRY_INFO(kLogAlloc, "cuda runtime: device allocation %p, %zu bytes", p, bytes);
    return ncclSuccess;
  }
  Status allocHost(size_t bytes, std::unique_ptr<HostMemory>* out) override {
    if (bytes == 0 || out == nullptr) FERRY_FAIL(ncclInvalidArgument, "allocHost: bad args");
    if (bytes >= kHugeHostMinBytes && hugeHostPagesWanted()) {
      *out = allocHugeHost(bytes);
      if (*out != nullptr) return ncclSuccess;
    }
    void* p = nullptr;
    // Mapped + portable: usable by every device, and as a stream memory
    // operation target (its UVA address is its device address).
    FERRY_CUDA_TRY(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    *out = std::make_unique<CudaHostMemory>(p, bytes);
    return ncclSuccess;
  }
  Status exportIpc(const DeviceMemory& mem, IpcDescriptor* out) override;
  Status importIpc(IpcDescriptor& desc, std::unique_ptr<IpcMapping>* out) override;

  Status createStream(std::unique_ptr<Stream>* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "createStream: null output");
    cudaStream_t s = nullptr;
    FERRY_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = std::make_unique<CudaStream>(s, /*owner=*/true);
    return ncclSuccess;
  }
  Status createStreamWithPriority(int priority, std::unique_ptr<Stream>* out) override;
  Status createEvent(std::unique_ptr<Event>* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "createEvent: null output");
    cudaEvent_t e = nullptr;
    FERRY_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = std::make_unique<CudaEvent>(e);
    return ncclSuccess;
  }
  Status launch(const KernelLaunch& k, Stream& stream) override {
    if (k.func == nullptr) FERRY_FAIL(ncclInvalidArgument, "launch: null kernel");
    dim3 grid(k.grid[0], k.grid[1], k.grid[2]);
    dim3 block(k.block[0], k.block[1], k.block[2]);
    auto s = static_cast<cudaStream_t>(stream.nativeHandle());
    FERRY_CUDA_TRY(cudaLaunchKernel(k.func, grid, block, k.args, k.sharedBytes, s));
    return ncclSuccess;
  }
  Status wrapUserStream(void* handle, std::unique_ptr<Stream>* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "wrapUserStream: null output");
    // NULL is the legacy default stream (we are not built per-thread).
    *out = std::make_unique<CudaStream>(static_cast<cudaStream_t>(handle), /*owner=*/false);
    return ncclSuccess;
  }

  Status registerHost(void* ptr, size_t bytes, std::unique_ptr<HostRegistration>* out) override {
    return cuda::registerHostRange(ptr, bytes, out);
  }
  Status describeAllocation(const void* ptr, size_t bytes, AllocationInfo* out) override {
    return cuda::describeAllocation(ptr, bytes, out);
  }
  Status exportAllocationFd(uint64_t allocId, UniqueFd* out) override {
    FERRY_FAIL(ncclInvalidUsage,
               "exportAllocationFd: the CUDA runtime shares allocations by legacy IPC handles "
               "(AllocationInfo::ipc.bytes), not by file descriptors");
  }
  bool lazyModuleLoading() override { return cuda::lazyModuleLoading(); }
  Status preloadKernels() override { return cuda::preloadKernels(); }
  Status collKernel(int dataType, int fn, int proto, const void** func,
                    unsigned* threads) override {
    *func = fn == kP2pKernelFn ? device::p2pKernel(proto == kP2pSmallArgs)
                               : device::collKernel(dataType, fn, proto);
    *threads = device::kCollKernelThreads;
    if (*func == nullptr) {
      FERRY_FAIL(ncclInvalidUsage,
                 "no collective kernel for datatype %d / function %d / protocol %d in this "
                 "build (FERRY_KERNEL_TYPES restricts the kernel set)",
                 dataType, fn, proto);
    }
    return ncclSuccess;
  }
  Status enablePeerAccess(int peerDevice) override;
  Status canAccessPeer(int device, int peerDevice, bool* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "canAccessPeer: null output");
    int can = 0;
    FERRY_CUDA_TRY(cudaDeviceCanAccessPeer(&can, device, peerDevice));
    *out = can != 0;
    return ncclSuccess;
  }
  Status deviceByBusId(const std::string& busId, int* device) override {
    if (device == nullptr) FERRY_FAIL(ncclInvalidArgument, "deviceByBusId: null output");
    if (cudaDeviceGetByPCIBusId(device, busId.c_str()) != cudaSuccess) {
      (void)cudaGetLastError();  // not visible here: not an error of the context
      return ncclInvalidArgument;
    }
    return ncclSuccess;
  }
  Status checkUserBuffer(const void* ptr, size_t bytes, bool* ok) override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      (void)cudaGetLastError();
      *ok = false;
      return ncclSuccess;
    }
    *ok = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ||
          attr.type == cudaMemoryTypeHost;
    (void)bytes;
    return ncclSuccess;
  }
  Status copyIsAsync(const void* dst, const void* src, bool* out) override {
    auto onDevice = [](const void* p) {
      cudaPointerAttributes attr{};
      if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      return attr.type == cudaMemoryTypeDevice;
    };
    *out = onDevice(dst) && onDevice(src);
    return ncclSuccess;
  }
  Status isCapturing(void* handle, bool* out) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    FERRY_CUDA_TRY(cudaStreamIsCapturing(static_cast<cudaStream_t>(handle), &status));
    *out = status != cudaStreamCaptureStatusNone;
    return ncclSuccess;
  }
  int exchangeCaptureMode(int mode) override {
    auto m = static_cast<cudaStreamCaptureMode>(mode);
    if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) return mode;
    return static_cast<int>(m);
  }
};

Status CudaRuntime::createStreamWithPriority(int priority, std::unique_ptr<Stream>* out) {
  if (out == nullptr || priority > 0) {
    FERRY_FAIL(ncclInvalidArgument, "createStreamWithPriority: bad arguments (priority %d)",
               priority);
  }
  if (priority == 0) return createStream(out);
  // CUDA: lower numbers are higher priorities; any negative request gets the
  // device's highest (e.g. -5 on Hopper with CUDA 12+).
  int least = 0, greatest = 0;
  FERRY_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  FERRY_CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  *out = std::make_unique<CudaStream>(s, /*owner=*/true);
  return ncclSuccess;
}

Status CudaRuntime::enablePeerAccess(int peerDevice) {
  int device = -1;
  FERRY_CUDA_TRY(cudaGetDevice(&device));
  if (peerDevice == device) return ncclSuccess;  // own memory: nothing to enable
  cudaError_t e = cudaDeviceEnablePeerAccess(peerDevice, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not the user's error to find later
    return ncclSuccess;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    FERRY_FAIL(ncclUnhandledCudaError,
               "CUDA call cudaDeviceEnablePeerAccess(%d) from device %d "
               "failed: %s (%d)",
               peerDevice, device, cudaGetErrorString(e), static_cast<int>(e));
  }
  FERRY_INFO(kLogInit, "cuda runtime: device %d can now access device %d", device, peerDevice);
  return ncclSuccess;
}

Status CudaRuntime::deviceCount(int* count) {
  if (count == nullptr) FERRY_FAIL(ncclInvalidArgument, "deviceCount: null output");
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary ||
      e == cudaErrorNotSupported) {
    // No GPU or no driver: a normal situation (CI), not an error.
    (void)cudaGetLastError();
    FERRY_INFO(kLogInit, "cuda runtime: no usable device (%s)", cudaGetErrorString(e));
    *count = 0;
    return ncclSuccess;
  }
  FERRY_CUDA_TRY(e);
  return ncclSuccess;
}

Status CudaRuntime::pciBusId(int device, std::string* busId) {
  if (busId == nullptr) FERRY_FAIL(ncclInvalidArgument, "pciBusId: null output");
  char buf[64] = {0};
  FERRY_CUDA_TRY(cudaDeviceGetPCIBusId(buf, sizeof(buf), device));
  // Lower case, as in /sys/bus/pci paths, so ids compare as plain strings.
  std::string id(buf);
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  *busId = id;
  return ncclSuccess;
}

Status CudaRuntime::exportIpc(const DeviceMemory& mem, IpcDescriptor* out) {
  if (out == nullptr || mem.ptr() == nullptr)
    FERRY_FAIL(ncclInvalidArgument, "exportIpc: bad args");
  const DriverApi* api = nullptr;
  FERRY_CHECK(driverApi(&api));
  // The handle names the whole allocation; the offset locates ptr inside it.
  CUdeviceptr base = 0;
  size_t rangeSize = 0;
  auto ptr = reinterpret_cast<CUdeviceptr>(mem.ptr());
  FERRY_CU_TRY(api->memGetAddressRange(&base, &rangeSize, ptr));
  cudaIpcMemHandle_t handle;
  FERRY_CUDA_TRY(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)));
  *out = IpcDescriptor{};
  out->type = IpcDescriptor::Type::CudaLegacy;
  out->size = mem.size();
  out->offset = ptr - base;
  memcpy(out->bytes, &handle, sizeof(handle));
  return ncclSuccess;
}

Status CudaRuntime::importIpc(IpcDescriptor& desc, std::unique_ptr<IpcMapping>* out) {
  UniqueFd fd(desc.fd);  // legacy handles carry no fd; close any we were given
  desc.fd = -1;
  if (desc.type != IpcDescriptor::Type::CudaLegacy || out == nullptr || desc.size == 0) {
    FERRY_FAIL(ncclInvalidArgument, "importIpc: unsupported descriptor type %u",
               static_cast<unsigned>(desc.type));
  }
  const DriverApi* api = nullptr;
  FERRY_CHECK(driverApi(&api));
  std::shared_ptr<OpenHandle> opened;
  FERRY_CHECK(openShared(desc.bytes, &opened));
  void* base = opened->base;
  auto mapping = std::make_unique<CudaIpcMapping>(std::move(opened), desc.offset, desc.size);
  // Bad input must fail cleanly: the range must lie inside the allocation.
  CUdeviceptr rangeBase = 0;
  size_t rangeSize = 0;
  FERRY_CU_TRY(
      api->memGetAddressRange(&rangeBase, &rangeSize, reinterpret_cast<CUdeviceptr>(base)));
  if (desc.offset + desc.size < desc.offset || desc.offset + desc.size > rangeSize) {
    FERRY_FAIL(ncclInvalidArgument, "importIpc: range [%lu, +%lu) outside the %zu-byte allocation",
               static_cast<unsigned long>(desc.offset), static_cast<unsigned long>(desc.size),
               rangeSize);
  }
  *out = std::move(mapping);
  return ncclSuccess;
}

}  // namespace

std::unique_ptr<Runtime> makeCudaRuntime() {
  return std::make_unique<CudaRuntime>();
}

}  // namespace ferry::rt

#endif  // FERRY_WITH_CUDA
