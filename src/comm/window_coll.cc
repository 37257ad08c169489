#include "comm/window_coll.h"

#include <numeric>

#include "algo/reduce_ops.h"
#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/internal_comm.h"
#include "core/log.h"

namespace ferry {

WindowColl::WindowColl(Communicator* parent, unsigned ops) : parent_(parent), ops_(ops) {
  const Topology& topo = parent->topology();
  const int me = parent->rank();
  minBytes_ = static_cast<uint64_t>(
      std::max<int64_t>(0, parent->params().getInt(ParamId::WinCollMinBytes)));
  usable_ = minBytes_ > 0 && ops_ != 0 && parent->nranks() > 1 && topo.nHosts == 1 &&
            parent->params().getInt(ParamId::PassSm) != 0 && parent->p2p() != nullptr;
  for (int q = 0; usable_ && q < parent->nranks(); ++q) {
    if (q == me) continue;
    // Ranks sharing a process are driven by one thread, which could not
    // make the internal communicator rank after rank (each waits for all).
    usable_ = topo.links[q] == PeerLink::SameHost && parent->p2p()->mapsPeerMemory(q);
  }
}

Status WindowColl::parseOps(const std::string& text, unsigned* mask) {
  *mask = 0;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string op = text.substr(at, comma - at);
    if (op == "broadcast") {
      *mask |= kOpBroadcast;
    } else if (op == "allgather") {
      *mask |= kOpAllGather;
    } else if (op != "none" && !op.empty()) {
      FERRY_FAIL(ncclInvalidArgument,
                 "FERRY_WIN_COLL_OPS=%s: '%s' is not broadcast, allgather or none", text.c_str(),
                 op.c_str());
    }
    at = comma + 1;
  }
  return ncclSuccess;
}

WindowColl::~WindowColl() {
  abort();
  std::unique_ptr<Communicator> comm;
  {
    // Taken out under the lock: a late abort() then finds nothing.
    std::lock_guard<std::mutex> lock(mu_);
    comm = std::move(comm_);
  }
  comm.reset();  // its destructor drops what is left of its messages (bounded)
}

bool WindowColl::chosen(const CollTask& t) const {
  if (!usable_) return false;
  const uint64_t bytes = t.count * algo::typeBytes(t.dataType);
  if (bytes < minBytes_) return false;
  uint64_t span = 0;
  if (t.coll == algo::kCollAllGather && (ops_ & kOpAllGather) != 0) {
    span = bytes * static_cast<uint64_t>(parent_->nranks());
  } else if (t.coll == algo::kCollBroadcast && (ops_ & kOpBroadcast) != 0) {
    span = bytes;
  } else {
    return false;
  }
  if (parent_->windows().collWindowHolding(t.recvbuff, span) == nullptr) return false;
  bool capturing = false;
  return parent_->runtime()->isCapturing(t.stream, &capturing) == ncclSuccess && !capturing;
}

std::vector<P2pTask> WindowColl::messages(const CollTask& t) const {
  const int n = parent_->nranks(), me = parent_->rank();
  const uint64_t bytes = t.count * algo::typeBytes(t.dataType);
  auto task = [&](bool isSend, int peer, const void* buffer) {
    P2pTask m;
    m.isSend = isSend;
    m.peer = peer;
    m.buffer = const_cast<void*>(buffer);
    m.bytes = bytes;
    m.stream = t.stream;
    return m;
  };
  char* out = static_cast<char*>(t.recvbuff);
  std::vector<P2pTask> tasks;
  if (t.coll == algo::kCollAllGather) {
    for (int p = 0; p < n; ++p) {
      char* slot = out + bytes * static_cast<uint64_t>(p);
      // In place (the shard already in its slot): nothing to self.
      if (p == me && t.sendbuff == slot) continue;
      tasks.push_back(task(false, p, slot));
      tasks.push_back(task(true, p, t.sendbuff));
    }
    return tasks;
  }
  if (me != t.root) {
    tasks.push_back(task(false, t.root, out));
    return tasks;
  }
  for (int p = 0; p < n; ++p) {
    if (p == me && t.sendbuff == out) continue;
    if (p == me) tasks.push_back(task(false, p, out));
    tasks.push_back(task(true, p, t.sendbuff));
  }
  return tasks;
}

Status WindowColl::ensureComm() {
  if (tried_) return made_;
  tried_ = true;
  // Drawn on every rank in the same order (split's counter).
  const uint32_t tag = parent_->nextSplitTag();
  std::vector<int> members(parent_->nranks());
  std::iota(members.begin(), members.end(), 0);
  // Its messages are SM-free by construction; liveness is the parent's.
  const Params params =
      parent_->params().withValue(ParamId::Liveness, "0").withValue(ParamId::WinCollMinBytes, "0");
  made_ =
      makeInternalComm(parent_, members, tag, params, false, "a window collective", mu_, &comm_);
  if (made_ != ncclSuccess) {
    FERRY_WARN(
        "rank %d: making the window collectives' communicator failed (%s); this communicator's "
        "window all-gathers and broadcasts fail from now on (FERRY_WIN_COLL_MIN_BYTES=0 runs "
        "them on the ring)",
        parent_->rank(), statusString(made_));
  } else {
    FERRY_INFO(kLogInit | kLogColl,
               "window collectives: rank %d copies %s%s%s of >= %llu bytes (per rank) straight "
               "into the peers' symmetric windows",
               parent_->rank(), (ops_ & kOpAllGather) != 0 ? "all-gathers" : "",
               ops_ == (kOpAllGather | kOpBroadcast) ? " and " : "",
               (ops_ & kOpBroadcast) != 0 ? "broadcasts" : "",
               static_cast<unsigned long long>(minBytes_));
  }
  return made_;
}

Status WindowColl::launch(const CollTask& t) {
  FERRY_CHECK(ensureComm());
  Status s = comm_->asyncError();
  if (s != ncclSuccess) {
    FERRY_FAIL(s == ncclInProgress ? ncclInternalError : s,
               "rank %d: the window collectives' communicator failed: %s", parent_->rank(),
               comm_->failure().c_str());
  }
  return comm_->p2p()->launch(messages(t));
}

double WindowColl::estimateUs(const CollTask& t) const {
  return estimateGroupUs(parent_->topology(), parent_->runtime()->kind() == rt::RuntimeKind::Host,
                         {}, messages(t));
}

void WindowColl::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!comm_) return;
  comm_->abort();
  if (comm_->p2p() != nullptr) comm_->p2p()->failAll();
}

uint64_t WindowColl::regionBytes() const {
  return comm_ && comm_->coll() != nullptr ? comm_->coll()->regionBytes() : 0;
}

Status WindowColl::shutdown(bool abort) {
  return comm_ ? comm_->shutdownP2p(abort) : ncclSuccess;
}

}  // namespace ferry
