// CPU time spent in the parts of the enqueue path, per communicator, when
// FERRY_PROFILE=1. Under PyTorch a point-to-point call costs Ferry hundreds
// of microseconds of host time that ferry-bench (same buffers, back to back)
// does not show (bench/RESULTS.md session 14); this says which part it is.
// Off, a scope costs one branch on a plain bool.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/clock.h"

namespace ferry {

enum class ProfSlot : int {
  GroupEnd,    // the outermost ncclGroupEnd that issued this communicator's work
  CollLaunch,  // Communicator::launchColl (ring or hierarchical)
  P2pKernel,   // kernel p2p launch (small messages, NCCL_PASS_SM=0, graphs)
  P2pSmFree,   // P2pEngine::launch as a whole
  Streams,     // wrapping the user's streams, capture checks
  Claim,       // claiming messages (rendezvous, mapping peers' buffers)
  Map,         // within Claim: describing our buffers for peers, mapping theirs
  PushWait,    // within Claim: the bounded wait for a receiver (FERRY_P2P_PUSH_WAIT_US)
  StageWait,   // within Claim: a staged send's wait before the pool grows
  MarkReady,   // ready flags and staging copies on the user's streams
  CopySecond,  // copies issued as the second side
  UserWaits,   // the user streams' waits for the peers' copies
  Fences,      // completion fences of the launch
  kCount
};

class CpuProfile {
 public:
  void enable(bool on) { on_ = on; }
  bool enabled() const { return on_; }
  void add(ProfSlot slot, int64_t ns);
  // "p2p.smfree n=12 avg=8.1 max=20.3 us; ..." for each slot used, or "".
  std::string describe() const;
  static int64_t nowNs() { return steadyNowNs(); }

 private:
  struct Slot {
    // Relaxed: statistics only; describe() may read a torn set of the
    // three (a count ahead of its total), which a profile tolerates.
    std::atomic<uint64_t> n{0}, totalNs{0}, maxNs{0};
  };
  std::array<Slot, static_cast<size_t>(ProfSlot::kCount)> slots_;
  bool on_ = false;
};

// Adds the scope's wall time to `slot` of `profile` (nullptr or disabled:
// nothing). The enqueue path is one thread per communicator at a time, so
// wall time here is that thread's time in the part, waits included.
class ProfScope {
 public:
  ProfScope(CpuProfile* profile, ProfSlot slot)
      : profile_(profile != nullptr && profile->enabled() ? profile : nullptr), slot_(slot) {
    if (profile_ != nullptr) start_ = CpuProfile::nowNs();
  }
  ~ProfScope() {
    if (profile_ != nullptr) profile_->add(slot_, CpuProfile::nowNs() - start_);
  }
  ProfScope(const ProfScope&) = delete;
  ProfScope& operator=(const ProfScope&) = delete;

 private:
  CpuProfile* profile_;
  ProfSlot slot_;
  int64_t start_ = 0;
};

}  // namespace ferry
