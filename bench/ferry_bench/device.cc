#include "ferry_bench/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#ifdef FERRY_BENCH_CUDA
#include <cuda_runtime.h>
#endif

namespace ferry::bench {
namespace {

constexpr size_t kHostAlign = 4096;

#ifdef FERRY_BENCH_CUDA
bool cudaOk(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error != nullptr) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}
#endif

bool ncclOk(const NcclLib* lib, ncclResult_t r, const char* what, std::string* error) {
  if (r == ncclSuccess) return true;
  if (error != nullptr) *error = std::string(what) + ": " + lib->errorText(r, nullptr);
  return false;
}

}  // namespace

const char* backendName(Backend backend) {
  return backend == Backend::Cuda ? "cuda" : "host";
}

Backend chooseBackend(std::string* why) {
  // The tool reads its environment directly: it is a program, not the library.
  const char* runtime = getenv("FERRY_RUNTIME");
  if (runtime != nullptr && strcmp(runtime, "host") == 0) {
    *why = "FERRY_RUNTIME=host";
    return Backend::Host;
  }
#ifdef FERRY_BENCH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    *why = "no CUDA device";
    return Backend::Host;
  }
  *why = std::to_string(count) + " CUDA device(s)";
  return Backend::Cuda;
#else
  *why = "built without CUDA";
  return Backend::Host;
#endif
}

bool Device::select(std::string* error) const {
#ifdef FERRY_BENCH_CUDA
  if (backend == Backend::Cuda) return cudaOk(cudaSetDevice(index), "cudaSetDevice", error);
#endif
  if (lib->ferrySetDevice == nullptr) return true;  // only Ferry has host devices
  return ncclOk(lib, lib->ferrySetDevice(index), "ncclFerrySetDevice", error);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == nullptr) return;
  if (fromLib_) {
    std::string ignored;  // the buffer is going away; nothing to report to
    (void)device_.select(&ignored);
    device_.lib->memFree(ptr_);
    return;
  }
#ifdef FERRY_BENCH_CUDA
  if (device_.backend == Backend::Cuda) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device_.index);
    cudaFree(ptr_);  // errors here cannot be reported; the process is ending the buffer
    cudaSetDevice(current);
    return;
  }
#endif
  free(ptr_);
}

void DeviceBuffer::swap(DeviceBuffer& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  std::swap(device_, o.device_);
  std::swap(fromLib_, o.fromLib_);
}

bool DeviceBuffer::allocateFromLib(const Device& device, size_t bytes, std::string* error) {
  if (device.lib == nullptr || !device.lib->hasWindows()) {
    *error = "--window: the library lacks ncclMemAlloc or ncclCommWindowRegister";
    return false;
  }
  void* p = nullptr;
  if (!device.select(error) ||
      !ncclOk(device.lib, device.lib->memAlloc(&p, std::max<size_t>(bytes, 1)), "ncclMemAlloc",
              error)) {
    return false;
  }
  DeviceBuffer fresh;
  fresh.device_ = device;
  fresh.bytes_ = bytes;
  fresh.ptr_ = static_cast<char*>(p);
  fresh.fromLib_ = true;
  *this = std::move(fresh);
  return true;
}

bool DeviceBuffer::allocate(const Device& device, size_t bytes, std::string* error) {
  DeviceBuffer fresh;
  fresh.device_ = device;
  fresh.bytes_ = bytes;
  const size_t rounded =
      std::max<size_t>(kHostAlign, (bytes + kHostAlign - 1) / kHostAlign * kHostAlign);
#ifdef FERRY_BENCH_CUDA
  if (device.backend == Backend::Cuda) {
    void* p = nullptr;
    if (!device.select(error) || !cudaOk(cudaMalloc(&p, rounded), "cudaMalloc", error))
      return false;
    fresh.ptr_ = static_cast<char*>(p);
    *this = std::move(fresh);
    return true;
  }
#endif
  fresh.ptr_ = static_cast<char*>(aligned_alloc(kHostAlign, rounded));
  if (fresh.ptr_ == nullptr) {
    *error = "out of host memory for " + std::to_string(bytes) + " bytes";
    return false;
  }
  *this = std::move(fresh);
  return true;
}

bool DeviceBuffer::upload(size_t offset, const void* src, size_t bytes, std::string* error) {
#ifdef FERRY_BENCH_CUDA
  if (device_.backend == Backend::Cuda) {
    // A pageable cudaMemcpy may return before its last DMA lands, and the
    // bench's streams do not order after the legacy stream: sync it.
    return device_.select(error) &&
           cudaOk(cudaMemcpy(ptr_ + offset, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy",
                  error) &&
           cudaOk(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize", error);
  }
#endif
  memcpy(ptr_ + offset, src, bytes);
  return true;
}

bool DeviceBuffer::download(size_t offset, void* dst, size_t bytes, std::string* error) const {
#ifdef FERRY_BENCH_CUDA
  if (device_.backend == Backend::Cuda) {
    return device_.select(error) &&
           cudaOk(cudaMemcpy(dst, ptr_ + offset, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy",
                  error);
  }
#endif
  memcpy(dst, ptr_ + offset, bytes);
  return true;
}

Stream::~Stream() {
  if (stream_ == nullptr) return;
#ifdef FERRY_BENCH_CUDA
  if (device_.backend == Backend::Cuda) {
    cudaStreamDestroy(stream_);
    return;
  }
#endif
  device_.lib->ferryStreamDestroy(stream_);
}

void Stream::swap(Stream& o) noexcept {
  std::swap(stream_, o.stream_);
  std::swap(device_, o.device_);
}

bool Stream::create(const Device& device, std::string* error) {
  if (!device.select(error)) return false;
  Stream fresh;
  fresh.device_ = device;
#ifdef FERRY_BENCH_CUDA
  if (device.backend == Backend::Cuda) {
    if (!cudaOk(cudaStreamCreateWithFlags(&fresh.stream_, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags", error)) {
      return false;
    }
    swap(fresh);
    return true;
  }
#endif
  if (!device.lib->hasFerryStreams()) {
    *error = "the host runtime needs Ferry's library (ncclFerryStream* missing in " +
             device.lib->path + ")";
    return false;
  }
  if (!ncclOk(device.lib, device.lib->ferryStreamCreate(&fresh.stream_), "ncclFerryStreamCreate",
              error)) {
    return false;
  }
  swap(fresh);
  return true;
}

bool Stream::synchronize(std::string* error) const {
#ifdef FERRY_BENCH_CUDA
  if (device_.backend == Backend::Cuda) {
    return device_.select(error) &&
           cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", error);
  }
#endif
  return ncclOk(device_.lib, device_.lib->ferryStreamSynchronize(stream_),
                "ncclFerryStreamSynchronize", error);
}

StreamTimer::~StreamTimer() {
#ifdef FERRY_BENCH_CUDA
  for (size_t i = 0; i < startEvents_.size(); ++i) {
    cudaSetDevice(devices_[i].index);
    cudaEventDestroy(static_cast<cudaEvent_t>(startEvents_[i]));
    cudaEventDestroy(static_cast<cudaEvent_t>(stopEvents_[i]));
  }
#endif
}

bool StreamTimer::init(const std::vector<Device>& devices,
                       const std::vector<const Stream*>& streams, std::string* error) {
  devices_ = devices;
  streams_ = streams;
  seconds_.assign(streams.size(), 0.0);
#ifdef FERRY_BENCH_CUDA
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].backend != Backend::Cuda) continue;
    cudaEvent_t a = nullptr, b = nullptr;
    if (!devices[i].select(error) || !cudaOk(cudaEventCreate(&a), "cudaEventCreate", error))
      return false;
    if (!cudaOk(cudaEventCreate(&b), "cudaEventCreate", error)) {
      cudaEventDestroy(a);
      return false;
    }
    startEvents_.push_back(a);
    stopEvents_.push_back(b);
  }
#endif
  return true;
}

bool StreamTimer::start(std::string* error) {
  hostStart_ = std::chrono::steady_clock::now();
#ifdef FERRY_BENCH_CUDA
  for (size_t i = 0; i < startEvents_.size(); ++i) {
    if (!devices_[i].select(error) ||
        !cudaOk(cudaEventRecord(static_cast<cudaEvent_t>(startEvents_[i]), streams_[i]->get()),
                "cudaEventRecord", error)) {
      return false;
    }
  }
#endif
  return true;
}

bool StreamTimer::stop(std::string* error) {
#ifdef FERRY_BENCH_CUDA
  for (size_t i = 0; i < stopEvents_.size(); ++i) {
    if (!devices_[i].select(error) ||
        !cudaOk(cudaEventRecord(static_cast<cudaEvent_t>(stopEvents_[i]), streams_[i]->get()),
                "cudaEventRecord", error)) {
      return false;
    }
  }
#endif
  for (const Stream* s : streams_) {
    if (!s->synchronize(error)) return false;
  }
  const double host =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - hostStart_).count();
  std::fill(seconds_.begin(), seconds_.end(), host);
#ifdef FERRY_BENCH_CUDA
  for (size_t i = 0; i < stopEvents_.size(); ++i) {
    float ms = 0;
    if (!cudaOk(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(startEvents_[i]),
                                     static_cast<cudaEvent_t>(stopEvents_[i])),
                "cudaEventElapsedTime", error)) {
      return false;
    }
    seconds_[i] = ms / 1e3;
  }
#endif
  return true;
}

double StreamTimer::seconds(size_t stream) const {
  return stream < seconds_.size() ? seconds_[stream] : 0.0;
}

double StreamTimer::maxSeconds() const {
  return seconds_.empty() ? 0.0 : *std::max_element(seconds_.begin(), seconds_.end());
}

}  // namespace ferry::bench
