#include "comm/hier_allreduce.h"

#include <algorithm>

#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "comm/internal_comm.h"
#include "core/log.h"
#include "runtime/device_scope.h"

namespace ferry {
namespace {

constexpr int kOpSum = 0;
constexpr int kOpAvg = 4;
constexpr int kNumBuiltinOps = 5;

// Destroys the PreMulSum made on the intra engine for one launch: a launch
// already enqueued copied what it needs (coll_engine.h).
class TempOp {
 public:
  TempOp(CollEngine* engine, int op, bool live) : engine_(engine), op_(op), live_(live) {}
  ~TempOp() {
    if (live_) (void)engine_->destroyOp(op_);
  }
  TempOp(const TempOp&) = delete;
  TempOp& operator=(const TempOp&) = delete;

 private:
  CollEngine* engine_;
  int op_;
  bool live_;
};

}  // namespace

HierShape HierAllReduce::layout(const Topology& topo, std::vector<int>* hostOf,
                                std::vector<int>* localOf) {
  // Hosts numbered by their first rank, local ranks by rank: the same
  // numbering on every rank.
  const int n = static_cast<int>(topo.peers.size());
  std::vector<uint64_t> hosts;
  std::vector<int> perHost;
  hostOf->assign(n, 0);
  localOf->assign(n, 0);
  for (int r = 0; r < n; ++r) {
    auto it = std::find(hosts.begin(), hosts.end(), topo.peers[r].hostHash);
    if (it == hosts.end()) {
      hosts.push_back(topo.peers[r].hostHash);
      perHost.push_back(0);
      it = hosts.end() - 1;
    }
    const int h = static_cast<int>(it - hosts.begin());
    (*hostOf)[r] = h;
    (*localOf)[r] = perHost[h]++;
  }
  HierShape s;
  s.hosts = static_cast<int>(hosts.size());
  const bool even =
      std::all_of(perHost.begin(), perHost.end(), [&perHost](int c) { return c == perHost[0]; });
  // Ranks sharing a process are driven by one thread, which could not make
  // their internal communicators one after another (each waits for all).
  const bool shared = std::count(topo.links.begin(), topo.links.end(), PeerLink::SameProcess) > 0;
  s.perHost = even && !shared && !perHost.empty() ? perHost[0] : 0;
  return s;
}

HierAllReduce::HierAllReduce(Communicator* parent) : parent_(parent) {
  const Topology& topo = parent->topology();
  std::vector<int> hostOf, localOf;
  shape_ = layout(topo, &hostOf, &localOf);
  hostIndex_ = hostOf[topo.myRank];
  localIndex_ = localOf[topo.myRank];
  for (size_t r = 0; r < hostOf.size(); ++r) {
    if (hostOf[r] == hostIndex_) intraMembers_.push_back(static_cast<int>(r));
    if (localOf[r] == localIndex_) crossMembers_.push_back(static_cast<int>(r));
  }
  AlgoMask masks[algo::kNumCollKinds];
  const std::string& text = parent->params().getString(ParamId::Algo);
  if (parseAlgos(text, masks) != ncclSuccess) {
    FERRY_WARN("NCCL_ALGO=%s ignored: Ferry's cost model chooses", text.c_str());
  }
  mask_ = masks[algo::kCollAllReduce];
  if (!mask_.ring && !mask_.tree) {
    FERRY_WARN("NCCL_ALGO=%s allows all-reduce no algorithm Ferry has (Ring, Tree): Ring runs",
               text.c_str());
  }
  if (shape_.perHost >= 2 && shape_.hosts >= 2 && mask_.tree) {
    FERRY_INFO(kLogInit | kLogColl,
               "collectives: all-reduce may run hierarchically (%d hosts x %d ranks; %s)",
               shape_.hosts, shape_.perHost,
               mask_.ring ? "by the cost model" : "always: NCCL_ALGO rules Ring out");
  }
}

HierAllReduce::~HierAllReduce() {
  abort();
  std::unique_ptr<Communicator> intra, cross;
  {
    // Taken out under the lock: a late abort() (a peer failure reported
    // while they go) then finds nothing.
    std::lock_guard<std::mutex> lock(mu_);
    intra = std::move(intra_);
    cross = std::move(cross_);
  }
  // Their destructors wait for their kernels (bounded).
  intra.reset();
  cross.reset();
}

bool HierAllReduce::chosen(const CollTask& t) const {
  if (t.coll != algo::kCollAllReduce) return false;
  // Avg divides by every rank in one 16-bit field (coll_ring.h).
  if (t.op == kOpAvg && static_cast<int64_t>(shape_.hosts) * shape_.perHost > UINT16_MAX) {
    return false;
  }
  const uint64_t bytes = t.count * algo::typeBytes(t.dataType);
  return chooseHierAllReduce(mask_, shape_, bytes,
                             parent_->runtime()->kind() == rt::RuntimeKind::Host);
}

double HierAllReduce::estimateUs(const CollTask& t) const {
  return allReduceHierUs(shape_.hosts, shape_.perHost, t.count * algo::typeBytes(t.dataType),
                         parent_->runtime()->kind() == rt::RuntimeKind::Host);
}

Status HierAllReduce::makeComm(const std::vector<int>& members, uint32_t tag,
                               std::unique_ptr<Communicator>* slot) {
  // This communicator's liveness ring watches every rank already, and the
  // internal ones carry no point-to-point (collectives only: no p2p
  // connections or FIFOs; the knobs keep any later p2p logic from acting).
  const Params params = parent_->params()
                            .withValue(ParamId::Liveness, "0")
                            .withValue(ParamId::PassSm, "1")
                            .withValue(ParamId::P2pKernelAcrossHosts, "0");
  return makeInternalComm(parent_, members, tag, params, true, "the hierarchical all-reduce", mu_,
                          slot);
}

Status HierAllReduce::ensureComms() {
  if (tried_) return made_;
  tried_ = true;
  // Both tags are drawn on every rank, in the same order (split's counter).
  const uint32_t intraTag = parent_->nextSplitTag();
  const uint32_t crossTag = parent_->nextSplitTag();
  // The first such all-reduce may be inside the user's graph capture.
  rt::RelaxedCaptureScope relaxed(parent_->runtime());
  made_ = makeComm(intraMembers_, intraTag, &intra_);
  if (made_ == ncclSuccess) made_ = makeComm(crossMembers_, crossTag, &cross_);
  if (made_ != ncclSuccess) {
    FERRY_WARN(
        "rank %d: making the hierarchical all-reduce's communicators failed (%s); this "
        "communicator's hierarchical all-reduces fail from now on (NCCL_ALGO=Ring avoids them)",
        parent_->rank(), statusString(made_));
  } else {
    FERRY_INFO(kLogInit | kLogColl,
               "hierarchical all-reduce: rank %d is local rank %d of host %d (%d hosts x %d)",
               parent_->rank(), localIndex_, hostIndex_, shape_.hosts, shape_.perHost);
  }
  return made_;
}

Status HierAllReduce::firstOp(const CollTask& t, int* op, bool* temp) {
  *temp = false;
  *op = t.op == kOpAvg ? kOpSum : t.op;
  if (t.op < kNumBuiltinOps) return ncclSuccess;
  const void* scalar = nullptr;
  int residence = 0;
  if (!parent_->coll()->userOpScalar(t.op, &scalar, &residence)) {
    FERRY_FAIL(ncclInvalidArgument, "ncclAllReduce: invalid reduction op %d", t.op);
  }
  FERRY_CHECK(intra_->coll()->createPreMulSum(scalar, t.dataType, residence, op));
  *temp = true;
  return ncclSuccess;
}

Status HierAllReduce::launch(const CollTask& t) {
  FERRY_CHECK(ensureComms());
  for (Communicator* c : {intra_.get(), cross_.get()}) {
    Status s = c->asyncError();
    if (s != ncclSuccess) {
      FERRY_FAIL(s == ncclInProgress ? ncclInternalError : s,
                 "rank %d: the hierarchical all-reduce's communicator failed: %s", parent_->rank(),
                 c->failure().c_str());
    }
  }
  int first = 0;
  bool temp = false;
  FERRY_CHECK(firstOp(t, &first, &temp));
  TempOp guard(intra_->coll(), first, temp);
  return launchSteps(t, first);
}

Status HierAllReduce::launchSteps(const CollTask& t, int first) {
  const uint64_t elt = algo::typeBytes(t.dataType);
  const uint64_t l = static_cast<uint64_t>(shape_.perHost);
  const uint64_t shard = t.count / l;
  const uint64_t main = shard * l;
  const auto* send = static_cast<const char*>(t.sendbuff);
  auto* recv = static_cast<char*>(t.recvbuff);
  // Step 2's op: what is left after step 1 applied `first`.
  CollTask across = t;
  across.op = t.op >= kNumBuiltinOps ? kOpSum : t.op;
  across.avgDivisor = static_cast<uint32_t>(shape_.hosts * shape_.perHost);
  CollTask inside = t;
  inside.op = first;
  if (shard > 0) {
    // NCCL's in-place conventions: this rank's shard of the output is
    // recvbuff + local * shard for both the reduce-scatter and the gather.
    char* mine = recv + localIndex_ * shard * elt;
    CollTask rs = inside;
    rs.coll = algo::kCollReduceScatter;
    rs.recvbuff = mine;
    rs.count = shard;
    FERRY_CHECK(intra_->coll()->launch({rs}));
    across.sendbuff = mine;
    across.recvbuff = mine;
    across.count = shard;
    FERRY_CHECK(cross_->coll()->launch({across}));
    CollTask ag = inside;
    ag.coll = algo::kCollAllGather;
    ag.op = kOpSum;
    ag.sendbuff = mine;
    ag.count = shard;
    FERRY_CHECK(intra_->coll()->launch({ag}));
  }
  if (main == t.count) return ncclSuccess;
  // The last count % L elements: reduce to local rank 0, all-reduce among
  // local ranks 0 across hosts, broadcast inside the host.
  char* tail = recv + main * elt;
  CollTask reduce = inside;
  reduce.coll = algo::kCollReduce;
  reduce.sendbuff = send + main * elt;
  reduce.recvbuff = tail;
  reduce.count = t.count - main;
  reduce.root = 0;
  FERRY_CHECK(intra_->coll()->launch({reduce}));
  if (localIndex_ == 0) {
    across.sendbuff = tail;
    across.recvbuff = tail;
    across.count = t.count - main;
    FERRY_CHECK(cross_->coll()->launch({across}));
  }
  CollTask bcast = reduce;
  bcast.coll = algo::kCollBroadcast;
  bcast.op = kOpSum;
  bcast.sendbuff = tail;
  return intra_->coll()->launch({bcast});
}

void HierAllReduce::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (intra_) intra_->abort();
  if (cross_) cross_->abort();
}

Status HierAllReduce::shutdown(bool abort) {
  Status first = ncclSuccess;
  for (Communicator* c : {intra_.get(), cross_.get()}) {
    if (c == nullptr) continue;
    Status s = c->shutdownColl(abort);
    if (first == ncclSuccess) first = s;
  }
  return first;
}

uint64_t HierAllReduce::regionBytes() const {
  uint64_t sum = 0;
  for (const Communicator* c : {intra_.get(), cross_.get()}) {
    if (c != nullptr && c->coll() != nullptr) sum += c->coll()->regionBytes();
  }
  return sum;
}

uint64_t HierAllReduce::collectiveFifoBytes() const {
  uint64_t sum = 0;
  for (const Communicator* c : {intra_.get(), cross_.get()}) {
    if (c != nullptr && c->coll() != nullptr) sum += c->coll()->collectiveFifoBytes();
  }
  return sum;
}

}  // namespace ferry
