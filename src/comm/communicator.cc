#include "comm/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/hash.h"
#include "runtime/device_scope.h"

namespace ferry {

Communicator::Communicator(Params params, CommConfig config, rt::Runtime* runtime, int nranks,
                           int rank, int device)
    : params_(std::move(params)),
      config_(std::move(config)),
      runtime_(runtime),
      nranks_(nranks),
      rank_(rank),
      device_(device) {}

Communicator::~Communicator() {
  // Streams, events and memory are released with this rank's device
  // current (the destroying thread may be driving another device).
  rt::DeviceScope device(runtime_, device_);
  if (profile_.enabled()) {
    const std::string p = profile_.describe();
    FERRY_INFO(kLogInit | kLogP2p, "comm %p rank %d: CPU profile (FERRY_PROFILE): %s",
               static_cast<void*>(this), rank_, p.empty() ? "no launches" : p.c_str());
  }
  liveness_.reset();  // goodbye to the neighbours; no callback after this
  abort();
  joinInit();
  (void)shutdownColl(true);
  (void)shutdownP2p(true);
  windows_.clear();  // windows never deregistered: their peer mappings go
  hier_.reset();     // its communicators report to this one until they go
  winColl_.reset();  // likewise
  coll_.reset();     // before the proxy the p2p engine holds goes away
  p2p_.reset();
}

Status Communicator::runInit(const std::vector<ncclUniqueId>& ids) {
  LogRankScope scope(rank_);
  // Init may run on the caller's thread (blocking) or a group/init thread:
  // bind it to the rank's device, and give a caller its own device back.
  rt::DeviceScope device(runtime_, device_);
  auto start = std::chrono::steady_clock::now();
  const std::string warnedBefore = lastWarning();
  Status s = device.status() != ncclSuccess ? device.status() : initSteps(ids);
  if (s == ncclSuccess) {
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    FERRY_INFO(kLogInit,
               "comm %p rank %d nranks %d device %d (%s) - Init COMPLETE in %.1f ms; holds %.1f "
               "MiB of %s memory for collectives and kernel p2p (collective FIFOs %.1f MiB)",
               static_cast<void*>(this), rank_, nranks_, device_, topology_.peers[rank_].busId, ms,
               coll_ ? coll_->regionBytes() / 1048576.0 : 0.0,
               coll_ && coll_->regionInHostMemory() ? "host shared" : "device",
               coll_ ? coll_->collectiveFifoBytes() / 1048576.0 : 0.0);
  } else if (lastWarning() != warnedBefore) {
    // A step already WARNed the cause: keep it as ncclGetLastError's answer.
    FERRY_INFO(kLogInit, "rank %d of %d: communicator init failed: %s", rank_, nranks_,
               statusString(s));
  } else {
    FERRY_WARN("rank %d of %d: communicator init failed: %s", rank_, nranks_, statusString(s));
  }
  publishInitResult(s);
  return s;
}

void Communicator::publishInitResult(Status s) {
  // A peer that died between the liveness ring's start and here failed the
  // communicator already (peerFailed could not change ncclInProgress).
  if (s == ncclSuccess && !failure().empty()) s = ncclRemoteError;
  // Release: everything init wrote (topology, bootstrap) is visible to any
  // thread that acquires asyncError_ and sees the final value.
  asyncError_.store(s, std::memory_order_release);
  std::lock_guard<std::mutex> lock(initMu_);
  initRunning_ = false;
  // Notified under the lock: a waiter in abort() may free this object as soon
  // as it gets the lock, so nothing here touches *this after the unlock.
  initCv_.notify_all();
}

Status Communicator::initSteps(const std::vector<ncclUniqueId>& ids) {
  if (ids.empty()) FERRY_FAIL(ncclInternalError, "communicator init without a unique id");
  // Every rank holds the same ids in the same order: the first names the
  // communicator (its connections' key).
  const ncclUniqueId& id = ids[0];
  std::string busId;
  FERRY_CHECK(runtime_->pciBusId(device_, &busId));

  boot::BootstrapOptions opts = boot::BootstrapOptions::fromParams(params_);
  opts.abortFlag = &abortFlag_;
  FERRY_CHECK(boot::Bootstrap::createScalable(ids.data(), static_cast<int>(ids.size()), rank_,
                                              nranks_, opts, &bootstrap_));

  std::vector<PeerInfo> peers(nranks_);
  FERRY_CHECK(fillLocalPeerInfo(rank_, device_, static_cast<int>(runtime_->kind()), busId,
                                params_.getString(ParamId::HostId), &peers[rank_]));
  peers[rank_].maxCtas = config_.maxCTAs;
  peers[rank_].knobs = collectAgreedKnobs(params_);
  FERRY_CHECK(bootstrap_->allGather(peers.data(), sizeof(PeerInfo)));
  FERRY_CHECK(buildTopology(peers, rank_, &topology_));
  FERRY_INFO(kLogInit, "runtime %s, %s", rt::runtimeKindName(runtime_->kind()),
             describeTopology(topology_).c_str());
  // An agreed knob (equal on every rank by now): every rank fails here
  // alike, before any connection is made.
  FERRY_CHECK(WindowColl::parseOps(params_.getString(ParamId::WinCollOps), &winCollOps_));
  FERRY_CHECK(initP2p(id));
  FERRY_CHECK(startLiveness(fnv1a(id.internal, sizeof(id.internal))));
  // Nobody leaves init before everyone has validated the peer table, so a
  // rank that rejects it (duplicate device ...) fails the others' init too
  // instead of leaving them with a communicator nobody else has.
  FERRY_CHECK(bootstrap_->barrier());
  return ncclSuccess;
}

// Peers driven by this same process (ncclCommInitAll, several GPUs per
// process) are reached through plain pointers: kernels and copies need
// peer access to their devices. Enabled once; already enabled is fine.
Status Communicator::enableSameProcessPeers() {
  for (size_t p = 0; p < topology_.peers.size(); ++p) {
    if (topology_.links[p] != PeerLink::SameProcess) continue;
    int peerDevice = -1;
    FERRY_CHECK(runtime_->deviceByBusId(topology_.peers[p].busId, &peerDevice));
    bool can = false;
    FERRY_CHECK(runtime_->canAccessPeer(device_, peerDevice, &can));
    if (can) FERRY_CHECK(runtime_->enablePeerAccess(peerDevice));
  }
  return ncclSuccess;
}

Status Communicator::initP2p(const ncclUniqueId& id) {
  FERRY_CHECK(enableSameProcessPeers());
  std::shared_ptr<Proxy> proxy;
  FERRY_CHECK(Proxy::acquire(runtime_, params_.getInt(ParamId::ProxySpinUs), &proxy));
  P2pSetupContext ctx;
  ctx.runtime = runtime_;
  ctx.bootstrap = bootstrap_.get();
  ctx.topology = &topology_;
  ctx.params = &params_;
  ctx.proxy = proxy.get();
  ctx.device = device_;
  // The unique id differs for every communicator; ranks tell its connections apart.
  ctx.commKey = fnv1a(id.internal, sizeof(id.internal));
  ctx.abortFlag = &abortFlag_;
  ctx.timeoutMs = params_.getInt(ParamId::BootstrapTimeout) * 1000;
  // Every rank runs the same collective channels: the smallest maxCTAs wins.
  ctx.maxCtas = config_.maxCTAs;
  ctx.collectivesOnly = collectivesOnly_;
  for (const PeerInfo& p : topology_.peers) ctx.maxCtas = std::min(ctx.maxCtas, p.maxCtas);
  if (ctx.maxCtas != config_.maxCTAs) {
    FERRY_INFO(kLogInit, "maxCTAs %d (the smallest of all ranks'; this rank asked for %d)",
               ctx.maxCtas, config_.maxCTAs);
  }
  profile_.enable(params_.getInt(ParamId::Profile) != 0);
  FERRY_CHECK(P2pEngine::create(ctx, &asyncError_, proxy, &p2p_));
  p2p_->setProfile(&profile_);
  FERRY_CHECK(CollEngine::create(ctx, p2p_->peerProxyNames(), &coll_));
  coll_->setFailureHandler([this](int peer, const std::string& why) { peerFailed(peer, why); });
  if (topology_.nHosts > 1 && coll_->available()) hier_ = std::make_unique<HierAllReduce>(this);
  if (!collectivesOnly_) winColl_ = std::make_unique<WindowColl>(this, winCollOps_);
  return ncclSuccess;
}

Status Communicator::launchColl(const std::vector<CollTask>& tasks) {
  ProfScope prof(&profile_, ProfSlot::CollLaunch);
  // Runs of ring tasks between the others, in call order.
  std::vector<CollTask> ring;
  auto flushRing = [&]() -> Status {
    if (ring.empty()) return ncclSuccess;
    FERRY_CHECK(coll_->launch(ring));
    ringColls_ += ring.size();
    ring.clear();
    return ncclSuccess;
  };
  for (const CollTask& t : tasks) {
    if (hier_ && hier_->chosen(t)) {
      FERRY_CHECK(flushRing());
      FERRY_CHECK(hier_->launch(t));
      ++hierColls_;
    } else if (winColl_ && winColl_->chosen(t)) {
      FERRY_CHECK(flushRing());
      FERRY_CHECK(winColl_->launch(t));
    } else {
      ring.push_back(t);
    }
  }
  return flushRing();
}

std::vector<CollTask> Communicator::ringTasks(const std::vector<CollTask>& tasks) const {
  std::vector<CollTask> ring;
  for (const CollTask& t : tasks) {
    if (!(hier_ && hier_->chosen(t)) && !(winColl_ && winColl_->chosen(t))) ring.push_back(t);
  }
  return ring;
}

double Communicator::offRingEstimateUs(const std::vector<CollTask>& tasks) const {
  double us = 0;
  for (const CollTask& t : tasks) {
    if (hier_ && hier_->chosen(t)) {
      us += hier_->estimateUs(t);
    } else if (winColl_ && winColl_->chosen(t)) {
      us += winColl_->estimateUs(t);
    }
  }
  return us;
}

uint64_t Communicator::heldBytes() const {
  return (coll_ ? coll_->regionBytes() : 0) + (hier_ ? hier_->regionBytes() : 0) +
         (winColl_ ? winColl_->regionBytes() : 0);
}

uint64_t Communicator::collectiveFifoBytes() const {
  return (coll_ ? coll_->collectiveFifoBytes() : 0) + (hier_ ? hier_->collectiveFifoBytes() : 0);
}

Status Communicator::startLiveness(uint64_t commKey) {
  if (params_.getInt(ParamId::Liveness) == 0) return ncclSuccess;
  LivenessOptions o;
  o.rank = rank_;
  o.nranks = nranks_;
  o.commKey = commKey;
  o.setupTimeoutMs = params_.getInt(ParamId::BootstrapTimeout) * 1000;
  o.abortFlag = &abortFlag_;
  int64_t silence = params_.getInt(ParamId::PeerTimeout);
  if (silence > 0 && silence < 2) {
    FERRY_WARN("FERRY_PEER_TIMEOUT=%lld is below 2 s (two heartbeats): using 2",
               static_cast<long long>(silence));
    silence = 2;
  }
  o.silenceMs = silence > 0 ? silence * 1000 : 0;
  o.onDead = [this](int peer, const std::string& why) { peerFailed(peer, why); };
  return LivenessRing::create(bootstrap_.get(), bootstrap_->listenAddress(), std::move(o),
                              &liveness_);
}

std::string Communicator::failure() const {
  std::lock_guard<std::mutex> lock(failureMu_);
  return failure_;
}

void Communicator::peerFailed(int peer, const std::string& why) {
  // Acquire: pairs with revoke()'s exchange. A revoked communicator is
  // quiescent; its peers' revokes close their connections too.
  if (revoked()) {
    FERRY_INFO(kLogInit, "comm %p rank %d (revoked): peer rank %d: %s", static_cast<void*>(this),
               rank_, peer, why.c_str());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(failureMu_);
    if (failure_.empty()) {
      failure_ = "peer rank " + std::to_string(peer) + " of " + std::to_string(nranks_) +
                 " is gone (" + why + ")";
    }
  }
  Status expected = ncclSuccess;
  // Release: a thread that reads the async error (acquire) sees failure_.
  if (asyncError_.compare_exchange_strong(expected, ncclRemoteError, std::memory_order_release)) {
    FERRY_WARN(
        "comm %p rank %d: peer rank %d is gone: %s. Every operation of this communicator "
        "fails with ncclRemoteError; abort it (ncclCommAbort) or shrink it (ncclCommShrink)",
        static_cast<void*>(this), rank_, peer, why.c_str());
  }
  // Kernels stop at their next wait; SM-free messages fail and release the
  // waits of this rank's streams. Both return at once.
  if (coll_) coll_->abortKernels();
  if (hier_) hier_->abort();
  if (winColl_) winColl_->abort();
  if (p2p_) p2p_->failAll();
  if (peerFailedHook_) peerFailedHook_(peer, why);
}

Status Communicator::revoke() {
  if (revoked_.exchange(true, std::memory_order_acq_rel)) return ncclSuccess;
  FERRY_INFO(kLogInit, "comm %p rank %d: revoked; stopping operations in flight",
             static_cast<void*>(this), rank_);
  if (coll_) coll_->abortKernels();
  if (hier_) hier_->abort();
  if (winColl_) winColl_->abort();
  if (p2p_) p2p_->failAll();
  Status c = shutdownColl(true);
  Status p = shutdownP2p(true);
  // Quiescent now: NCCL's state after a revoke is ncclSuccess, so that
  // split and shrink proceed, whatever the stopped operations reported
  // (an SM-free message in flight fails its connection with
  // ncclRemoteError, as do the peers' own revokes closing connections
  // across hosts; peerFailed ignores reports from here on). Release: pairs
  // with the acquire in asyncError().
  asyncError_.store(ncclSuccess, std::memory_order_release);
  return c != ncclSuccess ? c : p;
}

Status Communicator::shutdownP2p(bool abort) {
  if (!p2p_) return ncclSuccess;
  int64_t limit = params_.getInt(ParamId::P2pTimeout);
  return p2p_->shutdown(abort, limit > 0 ? limit * 1000 : INT64_MAX / 1000000);
}

Status Communicator::shutdownColl(bool abort) {
  if (!coll_) return ncclSuccess;
  if (abort) coll_->abortKernels();
  Status h = hier_ ? hier_->shutdown(abort) : ncclSuccess;
  Status w = winColl_ ? winColl_->shutdown(abort) : ncclSuccess;
  int64_t limit = params_.getInt(ParamId::CollTimeout);
  Status s = coll_->shutdown(limit > 0 ? limit * 1000 : INT64_MAX / 1000000);
  return s != ncclSuccess ? s : (h != ncclSuccess ? h : w);
}

void Communicator::startInitThread(std::function<void()> job) {
  initThread_ = std::thread(std::move(job));
}

void Communicator::abort() {
  // Release: pairs with the acquire loads in every bootstrap wait loop.
  abortFlag_.store(true, std::memory_order_release);
  waitInit();
  if (coll_) coll_->abortKernels();
  if (hier_) hier_->abort();
  if (winColl_) winColl_->abort();
}

void Communicator::waitInit() {
  std::unique_lock<std::mutex> lock(initMu_);
  initCv_.wait(lock, [this]() { return !initRunning_; });
}

void Communicator::joinInit() {
  if (initThread_.joinable()) initThread_.join();
}

Status Communicator::finalize() {
  Status s = asyncError();
  if (s != ncclSuccess) return s;
  finalized_ = true;
  // Every operation issued so far completes before Finalize returns.
  Status c = shutdownColl(false);
  Status p = shutdownP2p(false);
  return c != ncclSuccess ? c : p;
}

}  // namespace ferry
