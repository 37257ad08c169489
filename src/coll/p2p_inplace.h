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
  // The stream to copy on (an SM-free send's own; null: the launch
  // stream), after `waitFirst` (earlier readers of the same scratch).
  void* stream = nullptr;
  const std::vector<std::shared_ptr<rt::Event>>* waitFirst = nullptr;
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
  // Across the two paths: an SM-free send of the group (*smFree) whose
  // bytes a receive of the kernel launch (`kernel`) overwrites. The kernel
  // runs first, so such a send is copied to scratch on its own stream
  // before the kernel (appended to *copies; the kernel's stream waits for
  // it) and reads from there. The scratch is reused once the streams that
  // read it have passed the group (readersDone(), recorded after the
  // SM-free launch).
  [[nodiscard]] Status stageAcross(rt::Runtime* runtime, const std::vector<P2pTask>& kernel,
                                   std::vector<P2pTask>* smFree, std::vector<StagedSend>* copies);
  // After the group's SM-free launch: marks where the streams of the sends
  // stageAcross redirected are done with the scratch.
  [[nodiscard]] Status readersDone(rt::Runtime* runtime);
  bool readersPending() const { return !acrossReaders_.empty(); }
  uint64_t bytesHeld() const;

 private:
  [[nodiscard]] Status scratchFor(rt::Runtime* runtime, uint64_t bytes, bool capturing, char** out);

  std::unique_ptr<rt::DeviceMemory> current_;
  std::unique_ptr<rt::DeviceMemory> across_;             // stageAcross's scratch
  std::vector<void*> acrossReaders_;                     // this group's reader streams
  std::vector<std::shared_ptr<rt::Event>> readerMarks_;  // the last group's, passed = free
  // Outgrown buffers (an earlier launch may still read one) and captured
  // launches' buffers: freed with the engine, after its kernels have ended.
  std::vector<std::unique_ptr<rt::DeviceMemory>> kept_;
};

}  // namespace ferry
