// Where ferry-bench's buffers and streams live: CUDA devices (cudaMalloc,
// non-blocking streams, cudaEvent timing) or Ferry's host runtime (aligned
// host memory, streams from ncclFerryStreamCreate, std::chrono timing around
// launch + ncclFerryStreamSynchronize). The CUDA half exists only when built
// with FERRY_BENCH_CUDA.
//
// Every object belongs to the thread that created it; RAII frees it on the
// device it was created on.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "ferry_bench/nccl_lib.h"

namespace ferry::bench {

enum class Backend { Host, Cuda };
const char* backendName(Backend backend);

// CUDA when the tool has CUDA, FERRY_RUNTIME is not "host" and a device is
// visible; the host runtime otherwise (*why says which reason).
Backend chooseBackend(std::string* why);

// One device this process drives. Copyable description, no resources.
struct Device {
  Backend backend = Backend::Host;
  int index = 0;
  const NcclLib* lib = nullptr;

  bool select(std::string* error) const;  // cudaSetDevice / ncclFerrySetDevice
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer tmp(std::move(other));
    swap(tmp);
    return *this;
  }
  ~DeviceBuffer();

  bool allocate(const Device& device, size_t bytes, std::string* error);
  // From the library's ncclMemAlloc (freed with its ncclMemFree): memory
  // that can back a window (--window).
  bool allocateFromLib(const Device& device, size_t bytes, std::string* error);
  char* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  // Synchronous copies between this buffer (at byte offset) and host memory.
  bool upload(size_t offset, const void* src, size_t bytes, std::string* error);
  bool download(size_t offset, void* dst, size_t bytes, std::string* error) const;

 private:
  void swap(DeviceBuffer& o) noexcept;
  char* ptr_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  bool fromLib_ = false;  // ncclMemAlloc'd: device_.lib frees it
};

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept { swap(other); }
  ~Stream();

  bool create(const Device& device, std::string* error);
  cudaStream_t get() const { return stream_; }
  bool synchronize(std::string* error) const;

 private:
  void swap(Stream& o) noexcept;
  cudaStream_t stream_ = nullptr;
  Device device_;
};

// Times work enqueued on a set of streams between start() and stop(): CUDA
// events per stream (the slowest stream counts), or the host clock around
// the launches and the final synchronize. stop() synchronizes every stream.
class StreamTimer {
 public:
  StreamTimer() = default;
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  ~StreamTimer();

  bool init(const std::vector<Device>& devices, const std::vector<const Stream*>& streams,
            std::string* error);
  bool start(std::string* error);
  bool stop(std::string* error);
  // Seconds between start and stop, per stream (CUDA) or overall (host).
  double seconds(size_t stream = 0) const;
  double maxSeconds() const;

 private:
  std::vector<Device> devices_;
  std::vector<const Stream*> streams_;
  std::vector<void*> startEvents_, stopEvents_;  // cudaEvent_t, CUDA only
  std::vector<double> seconds_;
  std::chrono::steady_clock::time_point hostStart_;
};

}  // namespace ferry::bench
