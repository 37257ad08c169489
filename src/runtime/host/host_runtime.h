// The host runtime: a device emulated in host memory (DESIGN.md layer 9).
//
// What it emulates, and how faithfully:
// - Device memory is memfd-backed shared memory, so exportIpc/importIpc work
//   across processes (the memfd travels by SCM_RIGHTS) and both sides see the
//   same bytes. Pinned host memory is ordinary 64-byte-aligned memory.
// - A Stream is one worker thread running its operations in order; enqueue
//   calls return at once (asynchronous, like CUDA). Copies are memcpy,
//   writeValue64 is a release store made after all prior operations, and
//   waitValue64 polls the word with acquire loads (spinning briefly, then
//   sleeping with backoff, so long waits cost no CPU).
// - Errors inside a stream are sticky: later work is skipped and the error is
//   returned by synchronize/query and by later enqueues, as on CUDA.
// - Every blocking stream operation (waitValue64, waitEvent) gives up after
//   HostRuntimeOptions::waitTimeoutMs with a sticky ncclSystemError, so no
//   stream, and hence no synchronize or stream destruction, can hang forever.
// - Destroying a stream drains it first: its pending work runs to completion
//   (CUDA instead returns at once and finishes in the background).
// - Devices are numbers 0..deviceCount-1; the current device is per thread.
// - Zero-copy support: every live device allocation is listed in a
//   process-wide registry (host_registry.h) with an id that is never reused,
//   so describeAllocation finds it and exportAllocationFd dups its memfd.
//   registerHost returns the same address (host memory is "device" memory
//   here) but refuses page overlaps as cudaHostRegister does. No kernels are
//   loaded lazily: waitValue64Spin is waitValue64(Geq).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/runtime.h"

namespace ferry {
class Params;
}

namespace ferry::rt {

struct HostRuntimeOptions {
  int deviceCount = 8;
  // Initial current device of every thread (LOCAL_RANK modulo deviceCount).
  int initialDevice = 0;
  // Longest a stream operation may block before the stream fails.
  int64_t waitTimeoutMs = 600 * 1000;

  // Options from the param registry (FERRY_HOST_DEVICES) and LOCAL_RANK.
  static HostRuntimeOptions fromParams(const Params& params);
};

// A new, independent host runtime. getRuntime(RuntimeKind::Host) holds the
// process-wide one; tests make their own to use other options.
std::unique_ptr<Runtime> makeHostRuntime(const HostRuntimeOptions& options);

}  // namespace ferry::rt
