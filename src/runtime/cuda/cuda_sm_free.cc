// The top-level CMake glob also picks up this folder in builds without CUDA;
// the guard keeps such builds free of CUDA.
#ifdef FERRY_WITH_CUDA

#include "runtime/cuda/cuda_sm_free.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "device/kernels.h"
#include "runtime/cuda/cuda_driver.h"

namespace ferry::rt::cuda {
namespace {

class CudaHostRegistration final : public HostRegistration {
 public:
  CudaHostRegistration(void* host, void* dev, size_t size) : host_(host), dev_(dev), size_(size) {}
  ~CudaHostRegistration() override {
    if (cudaHostUnregister(host_) != cudaSuccess) (void)cudaGetLastError();
  }
  void* hostPtr() const override { return host_; }
  void* devicePtr() const override { return dev_; }
  size_t size() const override { return size_; }

 private:
  void* host_;
  void* dev_;
  size_t size_;
};

// What describeAllocation needs about one IPC-capable allocation, computed
// once per buffer id. Buffer ids are never reused in a process, so an entry
// can outlive its allocation without ever being returned for another one.
struct CachedAllocation {
  uint64_t base = 0;
  uint64_t size = 0;
  cudaIpcMemHandle_t handle;
};

struct AllocationCache {
  std::mutex mutex;
  std::unordered_map<uint64_t, CachedAllocation> byId;  // guarded by mutex
};

AllocationCache& allocationCache() {
  static AllocationCache* instance = new AllocationCache();  // leaked: used at exit
  return *instance;
}

// Entries of freed allocations are never looked up again; dropping them all
// now and then bounds the cache (live ones are simply recomputed).
constexpr size_t kMaxCachedAllocations = 16384;

// The IPC facts of buffer `id` holding `ptr`, from the cache or computed.
// *usable = false (success) when the driver will not make a handle for it.
Status cachedAllocation(const DriverApi* api, uint64_t id, CUdeviceptr ptr, CachedAllocation* out,
                        bool* usable) {
  *usable = true;
  AllocationCache& cache = allocationCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.byId.find(id);
    if (it != cache.byId.end()) {
      *out = it->second;
      return ncclSuccess;
    }
  }
  // cuMemGetAddressRange, not RANGE_START/RANGE_SIZE: it is what importIpc
  // checks the importer's mapping against (and what exportIpc uses).
  CUdeviceptr base = 0;
  size_t size = 0;
  FERRY_CU_TRY(api->memGetAddressRange(&base, &size, ptr));
  CachedAllocation entry;
  entry.base = base;
  entry.size = size;
  cudaError_t e = cudaIpcGetMemHandle(&entry.handle, reinterpret_cast<void*>(base));
  if (e != cudaSuccess) {
    // Not worth failing the caller: it falls back to a path without
    // zero-copy. Not cached, so a transient failure is retried.
    (void)cudaGetLastError();
    FERRY_INFO(kLogReg, "describeAllocation: cudaIpcGetMemHandle(%p) failed: %s; not mappable",
               reinterpret_cast<void*>(base), cudaGetErrorString(e));
    *usable = false;
    return ncclSuccess;
  }
  // Two threads may both miss and compute; either entry is right.
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.byId.size() >= kMaxCachedAllocations) cache.byId.clear();
  cache.byId[id] = entry;
  *out = entry;
  return ncclSuccess;
}

}  // namespace

Status registerHostRange(void* ptr, size_t bytes, std::unique_ptr<HostRegistration>* out) {
  if (ptr == nullptr || bytes == 0 || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "registerHost: bad arguments (%p, %zu bytes)", ptr, bytes);
  }
  // Portable: every device's context may use it; Mapped: it gets a device
  // address for stream memory operations and kernels.
  cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();
    FERRY_FAIL(ncclInvalidUsage,
               "registerHost: [%p, +%zu) shares pages with a range already registered in this "
               "process (register a shared region once, as a whole)",
               ptr, bytes);
  }
  FERRY_CUDA_TRY(e);
  void* dev = nullptr;
  e = cudaHostGetDevicePointer(&dev, ptr, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaHostUnregister(ptr);
    (void)cudaGetLastError();
    FERRY_FAIL(ncclUnhandledCudaError, "CUDA call cudaHostGetDevicePointer(%p) failed: %s (%d)",
               ptr, cudaGetErrorString(e), static_cast<int>(e));
  }
  *out = std::make_unique<CudaHostRegistration>(ptr, dev, bytes);
  FERRY_INFO(kLogAlloc, "cuda runtime: registered host %p (+%zu) as device %p", ptr, bytes, dev);
  return ncclSuccess;
}

Status describeAllocation(const void* ptr, size_t bytes, AllocationInfo* out) {
  if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "describeAllocation: null output");
  *out = AllocationInfo{};
  auto p = reinterpret_cast<CUdeviceptr>(ptr);
  if (p == 0 || p + bytes < p) return ncclSuccess;
  const DriverApi* api = nullptr;
  FERRY_CHECK(driverApi(&api));
  // Every value in 8 zeroed bytes: the driver writes 1 (bool), 4 (unsigned)
  // or 8 bytes, little-endian, so "!= 0" and the integers read correctly.
  uint64_t memType = 0, bufferId = 0, legacyIpc = 0, managed = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* values[] = {&memType, &bufferId, &legacyIpc, &managed};
  CUresult r = api->pointerGetAttributes(4, attrs, values, p);
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_CONTEXT) {
    // A pointer no context knows: not mappable, and not an error.
    FERRY_INFO(kLogReg, "describeAllocation(%p): unknown to CUDA (%s)", ptr, driverErrorString(r));
    return ncclSuccess;
  }
  FERRY_CU_TRY(r);
  // Host, pinned and managed memory, pool and cuMem allocations, and IPC
  // mappings of other processes' memory are all "not legacy-IPC capable".
  if (memType != CU_MEMORYTYPE_DEVICE || managed != 0 || legacyIpc == 0 || bufferId == 0) {
    return ncclSuccess;
  }
  CachedAllocation a;
  bool usable = false;
  FERRY_CHECK(cachedAllocation(api, bufferId, p, &a, &usable));
  if (!usable || p < a.base || p + bytes > a.base + a.size)
    return ncclSuccess;  // straddles the end
  // Small cudaMalloc allocations are carved out of shared 2 MiB driver
  // chunks, and a peer that opened one allocation's legacy handle cannot
  // open another of the same chunk (measured on H200/driver 580:
  // cudaIpcOpenMemHandle "already mapped"). Only offer allocations that own
  // their chunks: 2 MiB-aligned, whole multiples of 2 MiB (ncclMemAlloc
  // rounds up to that; PyTorch's caching allocator segments are like that).
  constexpr uint64_t kChunk = 2ull << 20;
  if (a.base % kChunk != 0 || a.size % kChunk != 0) return ncclSuccess;
  out->mappable = true;
  out->allocId = bufferId;
  out->base = a.base;
  out->size = a.size;
  out->ipc.type = IpcDescriptor::Type::CudaLegacy;
  out->ipc.size = a.size;
  out->ipc.offset = 0;  // the whole allocation
  out->ipc.fd = -1;
  static_assert(sizeof(a.handle) <= sizeof(out->ipc.bytes), "IPC handle does not fit");
  memcpy(out->ipc.bytes, &a.handle, sizeof(a.handle));
  return ncclSuccess;
}

bool lazyModuleLoading() {
  static std::once_flag warnOnce;
  const DriverApi* api = nullptr;
  CUmoduleLoadingMode mode = CU_MODULE_LAZY_LOADING;
  CUresult r = CUDA_ERROR_NOT_INITIALIZED;
  if (driverApi(&api) == ncclSuccess) {
    r = api->moduleGetLoadingMode(&mode);
    if (r == CUDA_ERROR_NOT_INITIALIZED) {
      // The mode is fixed when the driver initialises; any runtime call that
      // needs the driver initialises it (without creating a context).
      int count = 0;
      if (cudaGetDeviceCount(&count) != cudaSuccess) (void)cudaGetLastError();
      r = api->moduleGetLoadingMode(&mode);
    }
  }
  if (r != CUDA_SUCCESS) {
    std::call_once(warnOnce, [r] {
      FERRY_WARN("cuModuleGetLoadingMode failed (%s); assuming lazy module loading",
                 driverErrorString(r));
    });
    return true;
  }
  return mode == CU_MODULE_LAZY_LOADING;
}

namespace {

// Loads one kernel into the current context. With CUDA 12+ context-
// independent kernels, cudaFuncGetAttributes may answer from the library
// without finalizing the per-context load (the driver API documents attribute
// queries on unloaded functions); cuFuncLoad finalizes it now, so no Ferry
// kernel is loaded lazily later. (The GPU test that once pointed here failed
// for another reason: a pending cuStreamWaitValue64 keeps other streams'
// kernels from running, eager loading too; NOTES.md trap 16.)
Status loadKernel(const DriverApi& api, const device::KernelEntry& k, bool* loaded) {
  *loaded = false;
  if (api.funcLoad == nullptr || api.funcIsLoaded == nullptr) return ncclSuccess;
  cudaFunction_t fn = nullptr;
  FERRY_CUDA_TRY(cudaGetFuncBySymbol(&fn, k.func));
  CUfunction f = reinterpret_cast<CUfunction>(fn);
  CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
  FERRY_CU_TRY(api.funcIsLoaded(&state, f));
  if (state != CU_FUNCTION_LOADING_STATE_LOADED) {
    FERRY_CU_TRY(api.funcLoad(f));
    FERRY_CU_TRY(api.funcIsLoaded(&state, f));
  }
  *loaded = state == CU_FUNCTION_LOADING_STATE_LOADED;
  return ncclSuccess;
}

}  // namespace

// Runs at every communicator init; after the first on a context each kernel
// costs one symbol lookup and one state query.
Status preloadKernels() {
  const DriverApi* api = nullptr;
  FERRY_CHECK(driverApi(&api));
  size_t count = 0;
  const device::KernelEntry* kernels = device::allKernels(&count);
  size_t loaded = 0;
  for (size_t i = 0; i < count; ++i) {
    bool ok = false;
    FERRY_CHECK(loadKernel(*api, kernels[i], &ok));
    if (ok) {
      ++loaded;
      continue;
    }
    // Without cuFuncLoad, an attribute query is the best available nudge
    // (it loads the module on older drivers).
    cudaFuncAttributes attr;
    FERRY_CUDA_TRY(cudaFuncGetAttributes(&attr, kernels[i].func));
  }
  if (loaded != count) {
    static std::once_flag warnOnce;
    std::call_once(warnOnce, [loaded, count] {
      FERRY_WARN(
          "cuFuncLoad is not available or did not load every kernel (%zu of %zu): under lazy "
          "module loading a Ferry kernel's first launch may wait behind a pending stream wait",
          loaded, count);
    });
  }
  FERRY_INFO(kLogInit, "cuda runtime: %zu Ferry kernels loaded into the context", loaded);
  return ncclSuccess;
}

Status launchWaitGeq(cudaStream_t stream, uint64_t* devAddr, uint64_t value) {
  if (devAddr == nullptr || reinterpret_cast<uintptr_t>(devAddr) % alignof(uint64_t) != 0) {
    FERRY_FAIL(ncclInvalidArgument, "waitValue64Spin: bad address %p", static_cast<void*>(devAddr));
  }
  const volatile uint64_t* word = devAddr;
  uint64_t target = value;
  uint64_t timeoutNs = kSpinWaitTimeoutSec * 1000000000ull;
  void* args[] = {&word, &target, &timeoutNs};
  FERRY_CUDA_TRY(cudaLaunchKernel(device::waitGeqKernel(), dim3(1), dim3(1), args, 0, stream));
  return ncclSuccess;
}

}  // namespace ferry::rt::cuda

#endif  // FERRY_WITH_CUDA
