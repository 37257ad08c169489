#include "comm/group.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "runtime/device_scope.h"
#include "transport/net_setup.h"

namespace ferry {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<GroupJob> jobs;
  // Point-to-point tasks per communicator, in call order.
  std::vector<std::pair<Communicator*, std::vector<P2pTask>>> p2p;
  std::vector<std::pair<Communicator*, std::vector<CollTask>>> coll;
};

template <class Task>
void addTask(std::vector<std::pair<Communicator*, std::vector<Task>>>& list, Communicator* comm,
             const Task& task) {
  auto it =
      std::find_if(list.begin(), list.end(), [comm](const auto& e) { return e.first == comm; });
  if (it == list.end()) {
    list.emplace_back(comm, std::vector<Task>{});
    it = list.end() - 1;
  }
  it->second.push_back(task);
}

thread_local GroupState tlsGroup;

// Starts a job on its communicator's own thread; the communicator reports
// the outcome through ncclCommGetAsyncError.
void startInBackground(GroupJob& job) {
  auto run = std::move(job.run);
  job.comm->startInitThread([run]() { (void)run(); });
}

// Runs blocking jobs, one thread per communicator, and returns the first
// failure. Communicators run concurrently (each rank's init or
// registration waits for the others, so one thread could not run them one
// after another); one communicator's jobs run in call order on its thread:
// two window registrations of one communicator in one group (nccl-tests -R
// 2 registers its send and receive buffers so) are two collective steps
// every rank must take in the same order, and concurrently their bootstrap
// exchanges would pair one rank's first with another's second.
Status runConcurrently(std::vector<GroupJob>& jobs) {
  std::vector<std::vector<GroupJob*>> perComm;
  for (GroupJob& job : jobs) {
    auto it = std::find_if(perComm.begin(), perComm.end(),
                           [&job](const auto& list) { return list[0]->comm == job.comm; });
    if (it == perComm.end()) {
      perComm.push_back({&job});
    } else {
      it->push_back(&job);
    }
  }
  auto runInOrder = [](const std::vector<GroupJob*>& list) {
    Status first = ncclSuccess;
    for (GroupJob* job : list) {
      Status s = job->run();  // each later one runs too: its peers are waiting for it
      if (first == ncclSuccess) first = s;
    }
    return first;
  };
  if (perComm.size() == 1) return runInOrder(perComm[0]);
  std::vector<Status> results(perComm.size(), ncclSuccess);
  std::vector<std::thread> threads;
  threads.reserve(perComm.size());
  for (size_t i = 0; i < perComm.size(); ++i) {
    threads.emplace_back(
        [&perComm, &results, &runInOrder, i]() { results[i] = runInOrder(perComm[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (Status s : results) {
    if (s != ncclSuccess) return s;
  }
  return ncclSuccess;
}

// Which path each message takes (the same answer on both sides, from the
// byte count alone, so each path matches its messages in order per peer):
// kernel p2p for everything when NCCL_PASS_SM=0 or a stream is being
// captured into a CUDA graph (the proxy cannot take part in graph replays);
// otherwise kernel p2p for small messages (FERRY_P2P_KERNEL_MAX_BYTES, where
// it is measured faster) and SM-free for the rest. The kernel goes first:
// the SM-free operations' start events then follow it on the stream.
// A communicator spanning hosts has kernel p2p only when its lanes across
// hosts were set up at init (NCCL_PASS_SM=0 or FERRY_P2P_KERNEL_ACROSS_HOSTS
// =1, agreed by every rank), and never for small messages by default: every
// rank knows both (nHosts is global), so all of them choose alike.
Status launchKernelP2p(Communicator* comm, const std::vector<P2pTask>& tasks,
                       std::vector<P2pTask>* smFree) {
  const Params& params = comm->params();
  const bool kernelP2p = comm->coll()->kernelP2pPossible();
  bool allKernel = kernelP2p && params.getInt(ParamId::PassSm) == 0;
  for (size_t i = 0; !allKernel && i < tasks.size(); ++i) {
    if (i > 0 && tasks[i].stream == tasks[i - 1].stream) continue;  // asked already
    bool capturing = false;
    FERRY_CHECK(comm->runtime()->isCapturing(tasks[i].stream, &capturing));
    if (capturing && !kernelP2p) {
      FERRY_FAIL(ncclInvalidUsage,
                 "send/recv inside CUDA graph capture on a communicator of %d ranks spanning %d "
                 "hosts needs kernel p2p across hosts (the SM-free and network paths cannot be "
                 "captured), made at init on communicators of at most %d ranks unless "
                 "FERRY_P2P_KERNEL_ACROSS_HOSTS=0, and on any with "
                 "FERRY_P2P_KERNEL_ACROSS_HOSTS=1 or NCCL_PASS_SM=0 on every rank; or issue it "
                 "outside the capture",
                 comm->nranks(), comm->topology().nHosts, kAutoKernelLanesRanks);
    }
    if (capturing) {
      FERRY_INFO(kLogP2p,
                 "send/recv inside CUDA graph capture: using kernel p2p (the SM-free "
                 "path cannot be captured)");
      allKernel = true;
    }
  }
  const bool oneHost = comm->topology().nHosts <= 1;
  int64_t smallMax =
      kernelP2p && oneHost && comm->nranks() <= 32 ? params.getInt(ParamId::P2pKernelMaxBytes) : 0;
  std::vector<P2pTask> kernel;
  for (const P2pTask& t : tasks) {
    bool small = t.bytes > 0 && static_cast<int64_t>(t.bytes) <= smallMax;
    (allKernel || small ? kernel : *smFree).push_back(t);
  }
  if (kernel.empty()) return ncclSuccess;
  ProfScope prof(comm->profile(), ProfSlot::P2pKernel);
  FERRY_CHECK(comm->coll()->launchP2p(kernel, smFree));
  comm->p2p()->countKernelTasks(kernel);
  return ncclSuccess;
}

// The group's SM-free parts. One communicator's: launched whole. Several
// (one thread driving several ranks of this process): stepped, each step for
// every communicator before the next (P2pEngine::Step says why); a
// communicator whose step failed skips the rest (its messages failed on
// both sides); one with peers on other hosts is launched whole first.
Status launchSmFree(std::vector<std::pair<Communicator*, std::vector<P2pTask>>>& parts) {
  Status first = ncclSuccess;
  auto note = [&first](Status s) {
    if (first == ncclSuccess) first = s;
  };
  std::vector<std::pair<Communicator*, std::vector<P2pTask>>*> stepped;
  for (auto& part : parts) {
    Communicator* comm = part.first;
    if (parts.size() > 1 && comm->p2p()->steppable(part.second)) {
      stepped.push_back(&part);
      continue;
    }
    LogRankScope scope(comm->rank());
    note(comm->p2p()->launch(part.second));
  }
  std::vector<bool> failed(stepped.size(), false);
  for (int step = 0; step < P2pEngine::kSteps; ++step) {
    for (size_t i = 0; i < stepped.size(); ++i) {
      if (failed[i]) continue;
      Communicator* comm = stepped[i]->first;
      LogRankScope scope(comm->rank());
      Status s = comm->p2p()->launchStep(static_cast<P2pEngine::Step>(step), stepped[i]->second);
      failed[i] = s != ncclSuccess;
      note(s);
    }
  }
  return first;
}

}  // namespace

int groupDepth() {
  return tlsGroup.depth;
}

Status groupStart() {
  ++tlsGroup.depth;
  return ncclSuccess;
}

namespace {

// Runs the group's deferred inits: blocking ones here, concurrently; the
// others on their communicators' threads (*anyBackground).
Status runJobs(std::vector<GroupJob> jobs, bool* anyBackground) {
  std::vector<GroupJob> blocking;
  for (GroupJob& job : jobs) {
    if (job.blocking) {
      blocking.push_back(std::move(job));
    } else {
      startInBackground(job);
      *anyBackground = true;
    }
  }
  return blocking.empty() ? ncclSuccess : runConcurrently(blocking);
}

// Every communicator of a group, once each.
std::vector<Communicator*> groupComms(
    const std::vector<std::pair<Communicator*, std::vector<CollTask>>>& coll,
    const std::vector<std::pair<Communicator*, std::vector<P2pTask>>>& p2p) {
  std::vector<Communicator*> comms;
  for (auto& e : coll) comms.push_back(e.first);
  for (auto& e : p2p) {
    if (std::find(comms.begin(), comms.end(), e.first) == comms.end()) comms.push_back(e.first);
  }
  return comms;
}

// Estimated microseconds of the group's work: its slowest communicator.
double estimateUs(const std::vector<std::pair<Communicator*, std::vector<CollTask>>>& coll,
                  const std::vector<std::pair<Communicator*, std::vector<P2pTask>>>& p2p) {
  const std::vector<CollTask> noColl;
  const std::vector<P2pTask> noP2p;
  double slowest = 0;
  for (Communicator* c : groupComms(coll, p2p)) {
    auto ci = std::find_if(coll.begin(), coll.end(), [c](const auto& e) { return e.first == c; });
    auto pi = std::find_if(p2p.begin(), p2p.end(), [c](const auto& e) { return e.first == c; });
    const std::vector<CollTask>& tasks = ci != coll.end() ? ci->second : noColl;
    double us = estimateGroupUs(c->topology(), c->runtime()->kind() == rt::RuntimeKind::Host,
                                c->ringTasks(tasks), pi != p2p.end() ? pi->second : noP2p) +
                c->offRingEstimateUs(tasks);
    slowest = std::max(slowest, us);
  }
  return slowest;
}

// The first collective of a communicator sets up its ring (a collective step
// on its bootstrap, coll_engine.h). One thread may drive several ranks of
// one communicator (ncclCommInitAll), so several setups in one group run
// concurrently; a lone one runs inside its launch. A failure sticks to its
// communicator (its launch returns it); the others go on.
void connectRings(const std::vector<std::pair<Communicator*, std::vector<CollTask>>>& coll) {
  std::vector<const std::pair<Communicator*, std::vector<CollTask>>*> pending;
  for (const auto& e : coll) {
    if (e.first->coll()->needsConnect(e.first->ringTasks(e.second))) pending.push_back(&e);
  }
  if (pending.size() < 2) return;
  std::vector<std::thread> threads;
  threads.reserve(pending.size());
  for (const auto* e : pending) {
    threads.emplace_back([e]() {
      Communicator* comm = e->first;
      LogRankScope scope(comm->rank());
      rt::DeviceScope device(comm->runtime(), comm->device());
      if (device.status() == ncclSuccess)
        (void)comm->coll()->connectFor(comm->ringTasks(e->second));
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

Status groupSimulateEnd(float* estimatedUs) {
  GroupState& g = tlsGroup;
  if (g.depth == 0) {
    FERRY_FAIL(ncclInvalidUsage, "ncclGroupSimulateEnd called without a matching ncclGroupStart");
  }
  *estimatedUs = 0;
  if (--g.depth > 0) return ncclSuccess;
  *estimatedUs = static_cast<float>(estimateUs(g.coll, g.p2p));
  g.p2p.clear();  // simulated: never launched
  g.coll.clear();
  std::vector<GroupJob> jobs = std::move(g.jobs);
  g.jobs.clear();
  bool anyBackground = false;
  FERRY_CHECK(runJobs(std::move(jobs), &anyBackground));
  return anyBackground ? ncclInProgress : ncclSuccess;
}

Status groupEnd() {
  GroupState& g = tlsGroup;
  if (g.depth == 0) {
    FERRY_FAIL(ncclInvalidUsage, "ncclGroupEnd called without a matching ncclGroupStart");
  }
  if (--g.depth > 0) return ncclSuccess;
  std::vector<GroupJob> jobs = std::move(g.jobs);
  g.jobs.clear();
  auto p2p = std::move(g.p2p);
  g.p2p.clear();
  auto coll = std::move(g.coll);
  g.coll.clear();
  bool anyBackground = false;
  Status s = runJobs(std::move(jobs), &anyBackground);
  if (s != ncclSuccess) return s;
  // FERRY_PROFILE: the whole issue counts for every communicator in it
  // (no clock read, no list, when no communicator of the group profiles).
  const auto profiles = [](const auto& e) { return e.first->profile()->enabled(); };
  const bool profiling = std::any_of(coll.begin(), coll.end(), profiles) ||
                         std::any_of(p2p.begin(), p2p.end(), profiles);
  const int64_t startNs = profiling ? CpuProfile::nowNs() : 0;
  // Every communicator's tasks are issued even if an earlier one failed, so
  // peers waiting on them are not left hanging; the first error is returned.
  Status first = ncclSuccess;
  connectRings(coll);
  // Each communicator's work is enqueued with its own device current (one
  // thread may drive several devices' communicators in one group).
  for (auto& [comm, tasks] : coll) {
    LogRankScope scope(comm->rank());
    rt::DeviceScope device(comm->runtime(), comm->device());
    Status t = device.status() != ncclSuccess ? device.status() : comm->launchColl(tasks);
    if (first == ncclSuccess) first = t;
  }
  std::vector<std::pair<Communicator*, std::vector<P2pTask>>> smFree;
  for (auto& [comm, tasks] : p2p) {
    LogRankScope scope(comm->rank());
    rt::DeviceScope device(comm->runtime(), comm->device());
    std::vector<P2pTask> rest;
    Status t =
        device.status() != ncclSuccess ? device.status() : launchKernelP2p(comm, tasks, &rest);
    if (first == ncclSuccess) first = t;
    if (t == ncclSuccess && !rest.empty()) smFree.emplace_back(comm, std::move(rest));
  }
  Status t = launchSmFree(smFree);
  if (first == ncclSuccess) first = t;
  // Marks where the SM-free sends that kernel p2p copied aside are done
  // with their copies (CollEngine::launchP2p).
  for (auto& part : smFree) {
    Communicator* comm = part.first;
    if (!comm->coll()->needsAfterSmFree()) continue;  // the usual case: no device switch
    rt::DeviceScope device(comm->runtime(), comm->device());
    Status a = device.status() != ncclSuccess ? device.status() : comm->coll()->afterSmFree();
    if (first == ncclSuccess) first = a;
  }
  if (profiling) {
    const int64_t ns = CpuProfile::nowNs() - startNs;
    for (Communicator* c : groupComms(coll, p2p)) {
      if (c->profile()->enabled()) c->profile()->add(ProfSlot::GroupEnd, ns);
    }
  }
  if (first != ncclSuccess) return first;
  return anyBackground ? ncclInProgress : ncclSuccess;
}

void groupAddP2p(Communicator* comm, const P2pTask& task) {
  addTask(tlsGroup.p2p, comm, task);
}

void groupAddColl(Communicator* comm, const CollTask& task) {
  addTask(tlsGroup.coll, comm, task);
}

Status groupSubmit(GroupJob job) {
  if (tlsGroup.depth > 0) {
    tlsGroup.jobs.push_back(std::move(job));
    return ncclSuccess;
  }
  if (!job.blocking) {
    startInBackground(job);
    return ncclInProgress;
  }
  return job.run();
}

}  // namespace ferry
