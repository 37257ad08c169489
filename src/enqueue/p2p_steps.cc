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
      s = copyAsSecond(l.tasks, l.ops, l.streams, l.starts);
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
// before the streams' waits for those copies), then the user streams' waits
// and a fence per stream.
Status P2pEngine::finishStepped(Stepped& l) {
  if (!l.tasks.empty()) postWatches(l.ops);
  if (!l.pairs.empty()) FERRY_CHECK(copySelfPairs(l.all, l.pairs));
  if (l.tasks.empty()) return ncclSuccess;
  {
    ProfScope prof(profile_, ProfSlot::UserWaits);
    FERRY_CHECK(waitForPeers(l.tasks, l.ops, l.streams));
  }
  ProfScope prof(profile_, ProfSlot::Fences);
  for (size_t i = 0; i < l.tasks.size(); ++i) {
    const Op& op = l.ops[i];
    bool direct = op.block == nullptr && (op.first || op.peer.staged == 0);
    countTask(l.tasks[i], direct);
    // relaxed: statistics (describeCounters).
    if (!op.first) op.conn->counters.copiedOps.fetch_add(1, std::memory_order_relaxed);
  }
  // Fences: drop the passed ones, then add one per stream after its waits.
  dropPassedFences();
  for (size_t k = 0; k < l.streams.size(); ++k) {
    Fence fence{l.handles[k], nullptr};
    FERRY_CHECK(newEvent(&fence.event));
    FERRY_CHECK(fence.event->record(*l.streams[k]));
    fences_.push_back(std::move(fence));
  }
  return ncclSuccess;
}

// A stream passes its fences in the order they were recorded, so once one
// of a stream's fences is pending its later ones are too: one query per
// passed fence and per stream, however far ahead the CPU runs.
void P2pEngine::dropPassedFences() {
  std::vector<void*> pending;  // streams with a pending fence (a launch has one or two)
  size_t kept = 0;
  for (size_t i = 0; i < fences_.size(); ++i) {  // oldest first
    Fence& f = fences_[i];
    bool known = std::find(pending.begin(), pending.end(), f.stream) != pending.end();
    if (!known && f.event->query() == ncclSuccess) continue;  // passed: dropped
    if (!known) pending.push_back(f.stream);
    if (kept != i) fences_[kept] = std::move(f);
    ++kept;
  }
  fences_.resize(kept);
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
