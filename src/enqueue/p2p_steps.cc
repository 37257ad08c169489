// P2pEngine: a launch of same-host messages as four steps (p2p_engine.h,
// Step). launch() runs them in a row; comm/group.cc runs each step for every
// communicator of a group issued by one thread before the next step.
#include <algorithm>

#include "enqueue/p2p_engine.h"
#include "enqueue/p2p_engine_op.h"
#include "runtime/device_scope.h"

namespace ferry {

bool P2pEngine::steppable(const std::vector<P2pTask>& tasks) const {
  return std::none_of(tasks.begin(), tasks.end(), [this](const P2pTask& t) { return isNet(t); });
}

// Step ClaimReceives: the self pairs set aside (copied at Finish), the user
// streams wrapped, and the receives claimed.
Status P2pEngine::beginLocal(const std::vector<P2pTask>& tasks, Stepped& l) {
  l.all = tasks;
  FERRY_CHECK(selfPairs(l.all, &l.pairs));
  std::vector<bool> paired(l.all.size(), false);
  for (const SelfPair& p : l.pairs) paired[p.first] = paired[p.second] = true;
  for (size_t i = 0; i < l.all.size(); ++i) {
    if (!paired[i]) l.tasks.push_back(l.all[i]);
  }
  l.ops.assign(l.tasks.size(), Op{});
  {
    ProfScope prof(profile_, ProfSlot::Streams);
    for (size_t i = 0; i < l.tasks.size(); ++i) {
      FERRY_CHECK(streamFor(l.tasks[i].stream, l.handles, l.streams, &l.ops[i].stream));
    }
  }
  for (const SelfPair& p : l.pairs) {  // copied on the receives' streams
    for (size_t i = 0; i < l.tasks.size(); ++i) {
      if (l.tasks[i].stream == l.all[p.second].stream) l.ops[i].streamCopiesSelf = true;
    }
  }
  ProfScope prof(profile_, ProfSlot::Claim);
  return claimPass(l.tasks, l.ops, false);  // a failure fails what it claimed
}

Status P2pEngine::runStep(Stepped& l, Step step) {
  Status s = ncclSuccess;
  switch (step) {
    case Step::ClaimReceives:
      FERRY_FAIL(ncclInternalError, "ClaimReceives begins a launch (beginLocal)");
    case Step::ClaimSends: {
      {
        ProfScope prof(profile_, ProfSlot::Claim);
        FERRY_CHECK(claimPass(l.tasks, l.ops, true));  // a failure fails every claimed one
      }
      ProfScope prof(profile_, ProfSlot::MarkReady);
      s = markReady(l.tasks, l.ops, l.streams, &l.starts);
      break;
    }
    case Step::Copy: {
      ProfScope prof(profile_, ProfSlot::CopySecond);
      s = copyAsSecond(l);
      break;
    }
    case Step::Finish:
      return finishStepped(l);
  }
  if (s != ncclSuccess) failClaimed(l.ops, s);
  return s;
}

// Step Finish: the proxy watches the messages, the self pairs are copied
// (after the other messages' flags, so the peers' copies overlap them, and
// before the streams' waits for those copies; with FERRY_P2P_SELF_COPY=2
// after those waits instead, and with 3 those no peer copy carried in
// pieces: copyInPieces), then the user streams' waits and a fence per
// stream.
Status P2pEngine::finishStepped(Stepped& l) {
  if (!l.tasks.empty()) postWatches(l.ops);
  const bool selfAfter = selfCopy_ >= SelfCopy::After && !l.tasks.empty();
  if (!l.pairs.empty() && !selfAfter) FERRY_CHECK(copySelfPairs(l.all, l.pairs));
  if (l.tasks.empty()) return ncclSuccess;
  {
    ProfScope prof(profile_, ProfSlot::UserWaits);
    FERRY_CHECK(waitForPeers(l.tasks, l.ops, l.streams));
  }
  // After the peers' messages: an all-to-all's local block (a copy in HBM
  // at full speed) no longer runs beside its copies over NVLink. A GEMM
  // beside the traffic lost x1.055 with the two at once, x1.012 with the
  // local copy after (2x H200, ferry-overlap-floor, session 34).
  if (!l.pairs.empty() && selfAfter) FERRY_CHECK(copySelfPairs(l.all, l.pairs));
  ProfScope prof(profile_, ProfSlot::Fences);
  for (size_t i = 0; i < l.tasks.size(); ++i) {
    const Op& op = l.ops[i];
    bool direct = op.block == nullptr && (op.first || op.peer.staged == 0);
    countTask(l.tasks[i], direct);
    // relaxed: statistics (describeCounters).
    if (!op.first) op.conn->counters.copiedOps.fetch_add(1, std::memory_order_relaxed);
  }
  // Fences: each stream's, re-recorded after its waits.
  for (size_t k = 0; k < l.streams.size(); ++k) {
    FERRY_CHECK(recordFence(l.handles[k], *l.streams[k]));
  }
  return ncclSuccess;
}

// A program that makes new streams as it goes (one per iteration, say)
// would add a fence per stream forever: past kMaxFences, the fences that
// have passed are forgotten first (their streams get a new one if they come
// back).
Status P2pEngine::recordFence(void* handle, rt::Stream& stream) {
  constexpr size_t kMaxFences = 64;
  auto it = std::find_if(fences_.begin(), fences_.end(),
                         [handle](const Fence& f) { return f.stream == handle; });
  if (it == fences_.end()) {
    if (fences_.size() >= kMaxFences) {
      fences_.erase(std::remove_if(fences_.begin(), fences_.end(),
                                   [](Fence& f) { return f.event->query() == ncclSuccess; }),
                    fences_.end());
    }
    Fence fence{handle, nullptr};
    FERRY_CHECK(runtime_->createEvent(&fence.event));
    fences_.push_back(std::move(fence));
    it = fences_.end() - 1;
  }
  return it->event->record(stream);
}

Status P2pEngine::launchStep(Step step, const std::vector<P2pTask>& tasks) {
  // Each step on the communicator's device; the caller's comes back after.
  rt::DeviceScope device(runtime_, device_);
  Status s = device.status();
  if (step == Step::ClaimReceives) {
    if (stepped_) FERRY_FAIL(ncclInternalError, "a stepped p2p launch is already in progress");
    FERRY_CHECK(s);
    Status err = asyncError_->load(std::memory_order_acquire);
    if (err != ncclSuccess) {
      FERRY_FAIL(err, "communicator is in error state: %s", statusString(err));
    }
    if (!steppable(tasks)) {
      FERRY_FAIL(ncclInternalError, "a p2p launch with peers on other hosts cannot be stepped");
    }
    auto l = std::make_unique<Stepped>();
    FERRY_CHECK(beginLocal(tasks, *l));
    stepped_ = std::move(l);
    return ncclSuccess;
  }
  if (!stepped_) {
    FERRY_FAIL(ncclInvalidUsage, "step %d of a p2p launch that is not in progress",
               static_cast<int>(step));
  }
  if (s == ncclSuccess) {
    s = runStep(*stepped_, step);
  } else {
    failClaimed(stepped_->ops, s);  // the peers must not wait for our part
  }
  if (s != ncclSuccess || step == Step::Finish) stepped_.reset();
  return s;
}

}  // namespace ferry
