// DeviceScope: the communicator's device is current for the scope's
// lifetime, and the caller's device is current again afterwards (RAII).
//
// CUDA ties streams, events and kernels to the device current when they are
// made or launched: recording an event of one device on another device's
// stream, or launching a kernel on a stream of a device that is not current,
// fails with "invalid resource handle". One thread may drive several
// devices' communicators (ncclCommInitAll, nccl-tests -g N, JAX), so every
// place that touches a communicator's streams, events, memory or kernels
// opens one of these first; the host runtime enforces the same rules, so CI
// catches a missing scope without a GPU.
#pragma once

#include "runtime/runtime.h"

namespace ferry::rt {

class DeviceScope {
 public:
  DeviceScope(Runtime* runtime, int device) : runtime_(runtime) {
    status_ = runtime_->currentDevice(&saved_);
    if (status_ == ncclSuccess && saved_ != device) status_ = runtime_->setDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (saved_ >= 0 && runtime_->currentDevice(&now) == ncclSuccess && now != saved_) {
      (void)runtime_->setDevice(saved_);
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  // Whether the switch worked; callers fail with it before doing anything.
  [[nodiscard]] Status status() const { return status_; }

 private:
  Runtime* runtime_;
  int saved_ = -1;
  Status status_ = ncclSuccess;
};

// RelaxedCaptureScope: this thread may allocate, map and synchronize
// while a graph capture is under way anywhere in the process (CUDA refuses
// those calls in the default, global capture mode); the thread's previous
// mode comes back afterwards (RAII). Only for setup that touches no
// captured stream.
class RelaxedCaptureScope {
 public:
  explicit RelaxedCaptureScope(Runtime* runtime)
      : runtime_(runtime), saved_(runtime->exchangeCaptureMode(kRelaxed)) {}
  ~RelaxedCaptureScope() { (void)runtime_->exchangeCaptureMode(saved_); }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  static constexpr int kRelaxed = 2;  // cudaStreamCaptureModeRelaxed
  Runtime* runtime_;
  int saved_;
};

}  // namespace ferry::rt
