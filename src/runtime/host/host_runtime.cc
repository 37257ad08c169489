#include "runtime/host/host_runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "core/env.h"
#include "core/fd.h"
#include "core/params.h"
#include "runtime/host/host_registry.h"
#include "runtime/host/host_stream.h"

namespace ferry::rt {
namespace {

// What a fresh device allocation holds on the host runtime (allocDevice).
constexpr int kPoisonByte = 0xA5;

size_t pageSize() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

size_t roundUp(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// A MAP_SHARED mapping, unmapped on destruction. MAP_POPULATE maps every
// page in the one mmap call: touching fresh pages one fault at a time cost
// CI's VM more than the copies themselves (session 50: a 2 GiB message
// across two ranks 40-47 s, 23-25 s populated).
class SharedMapping {
 public:
  SharedMapping() = default;
  SharedMapping(void* base, size_t length) : base_(base), length_(length) {}
  ~SharedMapping() {
    if (base_ != nullptr) munmap(base_, length_);
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  char* base() const { return static_cast<char*>(base_); }

  static Status map(int fd, size_t length, SharedMapping* out) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      FERRY_FAIL(ncclSystemError, "host runtime: mmap of %zu bytes failed: %s", length,
                 strerror(errno));
    }
    out->base_ = p;
    out->length_ = length;
    return ncclSuccess;
  }

 private:
  void* base_ = nullptr;
  size_t length_ = 0;
};

// "Device" memory: a memfd (so it can be shared) mapped into this process,
// listed in the allocation registry (describeAllocation) while it lives.
class HostDeviceMemory final : public DeviceMemory {
 public:
  HostDeviceMemory(UniqueFd fd, size_t size) : fd_(std::move(fd)), size_(size) {}
  // Leaves the registry before the fd is closed and the pages unmapped, so
  // no exportAllocationFd can see a closed fd.
  ~HostDeviceMemory() override {
    if (id_ != 0) host::unregisterAllocation(id_);
  }
  void* ptr() const override { return mapping_.base(); }
  size_t size() const override { return size_; }
  int fd() const { return fd_.get(); }
  SharedMapping* mapping() { return &mapping_; }
  // Call once, after mapping.
  void publish() { id_ = host::registerAllocation(ptr(), size_, fd_.get()); }

 private:
  UniqueFd fd_;
  size_t size_;
  SharedMapping mapping_;
  uint64_t id_ = 0;  // 0: not registered
};

// Host "registration": the device address is the host address; the pages
// are claimed so overlapping registrations fail as they do on CUDA.
class HostRangeRegistration final : public HostRegistration {
 public:
  HostRangeRegistration(void* p, size_t size) : p_(p), size_(size) {}
  ~HostRangeRegistration() override { host::releaseHostRange(p_, size_); }
  void* hostPtr() const override { return p_; }
  void* devicePtr() const override { return p_; }
  size_t size() const override { return size_; }

 private:
  void* p_;
  size_t size_;
};

class AlignedHostMemory final : public HostMemory {
 public:
  AlignedHostMemory(void* p, size_t size) : p_(p), size_(size) {}
  ~AlignedHostMemory() override { std::free(p_); }
  void* ptr() const override { return p_; }
  size_t size() const override { return size_; }

 private:
  void* p_;
  size_t size_;
};

class HostIpcMapping final : public IpcMapping {
 public:
  HostIpcMapping(size_t offset, size_t size) : offset_(offset), size_(size) {}
  void* ptr() const override { return mapping_.base() + offset_; }
  size_t size() const override { return size_; }
  SharedMapping* mapping() { return &mapping_; }

 private:
  size_t offset_;
  size_t size_;
  SharedMapping mapping_;
};

// The current device is per thread, as cudaSetDevice's is. -1: not chosen yet
// (then the runtime's initial device applies). Shared by all host runtimes.
thread_local int tCurrentDevice = -1;

class HostRuntime final : public Runtime {
 public:
  explicit HostRuntime(const HostRuntimeOptions& options) : options_(options) {}

  RuntimeKind kind() const override { return RuntimeKind::Host; }

  Status deviceCount(int* count) override {
    if (count == nullptr) FERRY_FAIL(ncclInvalidArgument, "deviceCount: null output");
    *count = options_.deviceCount;
    return ncclSuccess;
  }

  Status currentDevice(int* device) override {
    if (device == nullptr) FERRY_FAIL(ncclInvalidArgument, "currentDevice: null output");
    *device = tCurrentDevice >= 0 ? tCurrentDevice : options_.initialDevice;
    return ncclSuccess;
  }

  Status setDevice(int device) override {
    FERRY_CHECK(checkDevice(device));
    tCurrentDevice = device;
    return ncclSuccess;
  }

  Status deviceByBusId(const std::string& busId, int* device) override {
    if (device == nullptr) FERRY_FAIL(ncclInvalidArgument, "deviceByBusId: null output");
    int count = 0;
    FERRY_CHECK(deviceCount(&count));
    for (int d = 0; d < count; ++d) {
      if (busId == "host:" + std::to_string(d)) {
        *device = d;
        return ncclSuccess;
      }
    }
    return ncclInvalidArgument;
  }
  Status checkUserBuffer(const void*, size_t, bool* ok) override {
    *ok = true;
    return ncclSuccess;
  }
  Status copyIsAsync(const void*, const void*, bool* out) override {
    *out = true;  // host streams copy on their own thread
    return ncclSuccess;
  }
  Status isCapturing(void*, bool* out) override {
    *out = false;
    return ncclSuccess;
  }
  int exchangeCaptureMode(int mode) override { return mode; }

  Status pciBusId(int device, std::string* busId) override {
    FERRY_CHECK(checkDevice(device));
    if (busId == nullptr) FERRY_FAIL(ncclInvalidArgument, "pciBusId: null output");
    *busId = "host:" + std::to_string(device);
    return ncclSuccess;
  }

  Status allocDevice(size_t bytes, std::unique_ptr<DeviceMemory>* out) override;
  Status allocHost(size_t bytes, std::unique_ptr<HostMemory>* out) override;
  Status exportIpc(const DeviceMemory& mem, IpcDescriptor* out) override;
  Status importIpc(IpcDescriptor& desc, std::unique_ptr<IpcMapping>* out) override;

  Status createStream(std::unique_ptr<Stream>* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "createStream: null output");
    int device = -1;
    FERRY_CHECK(currentDevice(&device));
    return host::makeOwnedStream(options_.waitTimeoutMs, device, out);
  }

  Status createStreamWithPriority(int priority, std::unique_ptr<Stream>* out) override {
    if (priority > 0) {
      FERRY_FAIL(ncclInvalidArgument, "createStreamWithPriority: priority %d > 0", priority);
    }
    return createStream(out);  // no priorities to emulate
  }

  Status createEvent(std::unique_ptr<Event>* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "createEvent: null output");
    int device = -1;
    FERRY_CHECK(currentDevice(&device));
    *out = std::make_unique<host::HostEvent>(device);
    return ncclSuccess;
  }

  Status launch(const KernelLaunch& k, Stream& stream) override;
  Status collKernel(int, int, int, const void**, unsigned*) override {
    FERRY_FAIL(ncclInvalidUsage, "the host runtime has no device kernels");
  }

  Status wrapUserStream(void* handle, std::unique_ptr<Stream>* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "wrapUserStream: null output");
    if (handle == nullptr) {
      int device = -1;
      FERRY_CHECK(currentDevice(&device));
      *out = host::makeSyncStream(options_.waitTimeoutMs, device);
      return ncclSuccess;
    }
    return host::wrapStreamHandle(handle, options_.waitTimeoutMs, out);
  }

  Status registerHost(void* ptr, size_t bytes, std::unique_ptr<HostRegistration>* out) override {
    if (ptr == nullptr || bytes == 0 || out == nullptr) {
      FERRY_FAIL(ncclInvalidArgument, "registerHost: bad arguments (%p, %zu bytes)", ptr, bytes);
    }
    FERRY_CHECK(host::claimHostRange(ptr, bytes));
    *out = std::make_unique<HostRangeRegistration>(ptr, bytes);
    return ncclSuccess;
  }

  Status describeAllocation(const void* ptr, size_t bytes, AllocationInfo* out) override;

  Status exportAllocationFd(uint64_t allocId, UniqueFd* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "exportAllocationFd: null output");
    return host::dupAllocationFd(allocId, out);
  }

  bool lazyModuleLoading() override { return false; }
  Status preloadKernels() override { return ncclSuccess; }

  Status enablePeerAccess(int peerDevice) override { return checkDevice(peerDevice); }

  Status canAccessPeer(int device, int peerDevice, bool* out) override {
    if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "canAccessPeer: null output");
    FERRY_CHECK(checkDevice(device));
    FERRY_CHECK(checkDevice(peerDevice));
    // All emulated devices share one memory; a device and itself is "no", as
    // cudaDeviceCanAccessPeer answers.
    *out = device != peerDevice;
    return ncclSuccess;
  }

 private:
  Status checkDevice(int device) const {
    if (device < 0 || device >= options_.deviceCount) {
      FERRY_FAIL(ncclInvalidArgument, "host runtime: device %d out of range [0, %d)", device,
                 options_.deviceCount);
    }
    return ncclSuccess;
  }

  const HostRuntimeOptions options_;
};

Status HostRuntime::allocDevice(size_t bytes, std::unique_ptr<DeviceMemory>* out) {
  if (bytes == 0 || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "allocDevice: bad arguments (%zu bytes)", bytes);
  }
  UniqueFd fd(memfd_create("ferry-dev", MFD_CLOEXEC));
  if (!fd) FERRY_FAIL(ncclSystemError, "host runtime: memfd_create failed: %s", strerror(errno));
  size_t length = roundUp(bytes, pageSize());
  if (ftruncate(fd.get(), static_cast<off_t>(length)) != 0) {
    FERRY_FAIL(ncclSystemError, "host runtime: ftruncate(%zu) failed: %s", length, strerror(errno));
  }
  auto mem = std::make_unique<HostDeviceMemory>(std::move(fd), bytes);
  FERRY_CHECK(SharedMapping::map(mem->fd(), length, mem->mapping()));
  // cudaMalloc'd memory holds whatever was there before: never zeros to
  // rely on. Poison it, so that CI finds code that forgets to initialize
  // device memory (flags, LL lines) that a GPU would only sometimes show.
  memset(mem->ptr(), kPoisonByte, bytes);
  mem->publish();
  FERRY_INFO(kLogAlloc, "host runtime: device allocation %p, %zu bytes", mem->ptr(), bytes);
  *out = std::move(mem);
  return ncclSuccess;
}

Status HostRuntime::allocHost(size_t bytes, std::unique_ptr<HostMemory>* out) {
  if (bytes == 0 || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "allocHost: bad arguments (%zu bytes)", bytes);
  }
  // 64-byte alignment: whole cache lines, like pinned allocations' pages.
  void* p = std::aligned_alloc(64, roundUp(bytes, 64));
  if (p == nullptr) FERRY_FAIL(ncclSystemError, "host runtime: out of memory (%zu bytes)", bytes);
  *out = std::make_unique<AlignedHostMemory>(p, bytes);
  return ncclSuccess;
}

Status HostRuntime::exportIpc(const DeviceMemory& mem, IpcDescriptor* out) {
  auto* hostMem = dynamic_cast<const HostDeviceMemory*>(&mem);
  if (hostMem == nullptr || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "exportIpc: not host-runtime device memory");
  }
  int dup = fcntl(hostMem->fd(), F_DUPFD_CLOEXEC, 0);
  if (dup < 0) FERRY_FAIL(ncclSystemError, "exportIpc: dup failed: %s", strerror(errno));
  *out = IpcDescriptor{};
  out->type = IpcDescriptor::Type::HostMemfd;
  out->size = hostMem->size();
  out->offset = 0;  // ptr() is the start of the mapping
  out->fd = dup;
  return ncclSuccess;
}

Status HostRuntime::importIpc(IpcDescriptor& desc, std::unique_ptr<IpcMapping>* out) {
  UniqueFd fd(desc.fd);  // ours now, closed on every path
  desc.fd = -1;
  if (desc.type != IpcDescriptor::Type::HostMemfd || !fd || desc.size == 0 || out == nullptr) {
    FERRY_FAIL(ncclInvalidArgument, "importIpc: not a host-runtime descriptor (type %u, fd %d)",
               static_cast<unsigned>(desc.type), fd.get());
  }
  // Bad input must fail cleanly, never map past the end of the file.
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    FERRY_FAIL(ncclSystemError, "importIpc: fstat failed: %s", strerror(errno));
  }
  uint64_t end = desc.offset + desc.size;
  if (end < desc.offset || end > static_cast<uint64_t>(st.st_size)) {
    FERRY_FAIL(ncclInvalidArgument,
               "importIpc: range [%lu, +%lu) outside the shared allocation (%ld bytes)",
               static_cast<unsigned long>(desc.offset), static_cast<unsigned long>(desc.size),
               static_cast<long>(st.st_size));
  }
  auto mapping = std::make_unique<HostIpcMapping>(desc.offset, desc.size);
  FERRY_CHECK(SharedMapping::map(fd.get(), roundUp(end, pageSize()), mapping->mapping()));
  *out = std::move(mapping);
  return ncclSuccess;
}

Status HostRuntime::describeAllocation(const void* ptr, size_t bytes, AllocationInfo* out) {
  if (out == nullptr) FERRY_FAIL(ncclInvalidArgument, "describeAllocation: null output");
  *out = AllocationInfo{};
  host::AllocationRecord rec;
  if (!host::findAllocation(ptr, bytes, &rec)) return ncclSuccess;  // not ours: not mappable
  out->mappable = true;
  out->allocId = rec.id;
  out->base = rec.base;
  out->size = rec.size;
  out->ipc.type = IpcDescriptor::Type::HostMemfd;
  out->ipc.size = rec.size;
  out->ipc.offset = 0;  // the whole allocation
  out->ipc.fd = -1;     // exportAllocationFd(allocId) supplies one
  return ncclSuccess;
}

Status HostRuntime::launch(const KernelLaunch& k, Stream& stream) {
  auto* host = dynamic_cast<host::HostStreamBase*>(&stream);
  if (host == nullptr || k.func == nullptr || k.numArgs < 0 ||
      (k.argSizes != nullptr && k.numArgs > 0 && k.args == nullptr)) {
    FERRY_FAIL(ncclInvalidArgument, "launch: bad arguments (func %p)", k.func);
  }
  // As CUDA: a kernel goes only to a stream of the current device.
  int current = -1;
  FERRY_CHECK(currentDevice(&current));
  if (host->device() != current) {
    FERRY_FAIL(ncclUnhandledCudaError,
               "host runtime: kernel launched on a stream of device %d while device %d is "
               "current (CUDA: invalid resource handle)",
               host->device(), current);
  }
  // Snapshot argument values now, as cudaLaunchKernel does (when described).
  struct Snapshot {
    std::vector<std::vector<unsigned char>> values;
    std::vector<void*> pointers;
  };
  auto snap = std::make_shared<Snapshot>();
  void** raw = k.args;
  if (k.argSizes != nullptr) {
    snap->values.resize(k.numArgs);
    snap->pointers.resize(k.numArgs);
    for (int i = 0; i < k.numArgs; ++i) {
      auto* src = static_cast<const unsigned char*>(k.args[i]);
      snap->values[i].assign(src, src + k.argSizes[i]);
      snap->pointers[i] = snap->values[i].data();
    }
    raw = nullptr;
  }
  auto args = [snap, raw] { return raw != nullptr ? raw : snap->pointers.data(); };
  if (k.hostReturnsStatus) {
    auto fn = reinterpret_cast<int (*)(void**)>(const_cast<void*>(k.func));
    return host->submit([fn, args] {
      if (fn(args()) == 0) return ncclSuccess;
      FERRY_WARN("host kernel %p failed; the stream is now in error", reinterpret_cast<void*>(fn));
      return ncclSystemError;
    });
  }
  auto fn = reinterpret_cast<void (*)(void**)>(const_cast<void*>(k.func));
  return host->submit([fn, args] {
    fn(args());
    return ncclSuccess;
  });
}

}  // namespace

HostRuntimeOptions HostRuntimeOptions::fromParams(const Params& params) {
  HostRuntimeOptions o;
  int64_t count = params.getInt(ParamId::HostDevices);
  if (count < 1 || count > 4096) {
    FERRY_WARN("FERRY_HOST_DEVICES=%ld out of range [1, 4096]; using 8", static_cast<long>(count));
    count = 8;
  }
  o.deviceCount = static_cast<int>(count);
  // LOCAL_RANK is set by launchers (torchrun, ferry-run), not a Ferry knob, so
  // it is not in the param table; this is the one read of it outside the
  // registry. It picks each local rank's default device, as users expect.
  std::string localRank = envString("LOCAL_RANK");
  if (!localRank.empty()) {
    char* end = nullptr;
    long r = strtol(localRank.c_str(), &end, 10);
    if (end != localRank.c_str() && *end == '\0' && r >= 0) {
      o.initialDevice = static_cast<int>(r % o.deviceCount);
    } else {
      FERRY_WARN("LOCAL_RANK='%s' is not a rank; default device 0", localRank.c_str());
    }
  }
  return o;
}

std::unique_ptr<Runtime> makeHostRuntime(const HostRuntimeOptions& options) {
  return std::make_unique<HostRuntime>(options);
}

}  // namespace ferry::rt
