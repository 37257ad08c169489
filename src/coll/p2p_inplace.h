// Kernel p2p with a send whose bytes a receive of the same launch
// overwrites (an in-place exchange: nccl-tests' in-place sendrecv, a swap).
// The kernel's send and receive blocks run at once, so a receive block may
// land data before the send block has read those bytes. Such sends are
// copied first, on the launch stream, into scratch device memory, and the
// kernel sends from there (as the SM-free path stages them).
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "enqueue/p2p_engine.h"
#include "runtime/runtime.h"

namespace ferry {

struct StagedSend {
  void* scratch = nullptr;
  const void* user = nullptr;
  uint64_t bytes = 0;
};

class InPlaceStager {
 public:
  // When some send of `tasks` overlaps some receive of `tasks`: *out is a
  // copy of `tasks` whose overlapping sends read from scratch, and *copies
  // the copies to make on the launch stream (tasks[0]'s) before the kernel
  // (after every earlier launch of the engine: the scratch is reused).
  // Otherwise both stay empty. A launch being captured into a CUDA graph,
  // whose replays keep the pointers, gets scratch of its own.
  [[nodiscard]] Status stage(rt::Runtime* runtime, const std::vector<P2pTask>& tasks,
                             std::vector<P2pTask>* out, std::vector<StagedSend>* copies);
  uint64_t bytesHeld() const;

 private:
  [[nodiscard]] Status scratchFor(rt::Runtime* runtime, uint64_t bytes, bool capturing, char** out);

  std::unique_ptr<rt::DeviceMemory> current_;
  // Outgrown buffers (an earlier launch may still read one) and captured
  // launches' buffers: freed with the engine, after its kernels have ended.
  std::vector<std::unique_ptr<rt::DeviceMemory>> kept_;
};

}  // namespace ferry
