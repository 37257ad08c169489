// Multi-process tests of the collectives (all-reduce, all-gather,
// reduce-scatter, broadcast, reduce, PreMulSum operators) through the public
// API, run under ferry-run on the host runtime (CI) and on CUDA (tests/gpu).
// Every input is fresh random data keyed by the agreed seed, every output is
// poisoned first, and every element is compared with a reference each rank
// computes on the host from all ranks' regenerated inputs (coll_ref.h).
//
// Cases: matrix, matrix_quick, big, stress, mixed, streams, abort, timeout, hier.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coll_ref.h"
#include "coll_util.h"
#include "core/env.h"
#include "common/buffers.h"
#include "common/random.h"
#include "ferry.h"
#include "mp_check.h"
#include "nccl.h"
#include "p2p_util.h"

#ifdef FERRY_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using namespace ferry::test;

constexpr int kFailureLimit = 20;  // all ranks stop once a rank has more

void announce(const World& w, const char* name) {
  if (w.rank != 0) return;
  printf("%s: %d ranks, seed %llu (reproduce with FERRY_TEST_SEED=%llu)\n", name, w.nranks,
         static_cast<unsigned long long>(w.seed), static_cast<unsigned long long>(w.seed));
}

// FERRY_TEST_TYPES=name,name,... (tests only): the datatypes the matrix and
// hier cases run, for layouts whose purpose is the ring or the shards across
// hosts rather than the arithmetic (every type runs in the one-host
// matrices and coll.hosts.matrix.2x1 / 2x2). Unset: every type. A name
// that is no type fails the run, so a typo cannot turn the case into a no-op.
std::vector<bool> parseTestTypes() {
  const std::string env = ferry::envString("FERRY_TEST_TYPES");
  std::vector<bool> selected(ncclNumTypes, env.empty());
  for (size_t at = 0; !env.empty() && at <= env.size();) {
    const size_t comma = std::min(env.find(',', at), env.size());
    const std::string name = env.substr(at, comma - at);
    at = comma + 1;
    int t = 0;
    while (t < ncclNumTypes && name != dataTypeName(static_cast<ncclDataType_t>(t))) ++t;
    EXPECT_TRUE(t < ncclNumTypes, "FERRY_TEST_TYPES=%s: \"%s\" is no datatype", env.c_str(),
                name.c_str());
    if (t < ncclNumTypes) selected[t] = true;
  }
  return selected;
}

bool typeSelected(ncclDataType_t type) {
  static const std::vector<bool> selected = parseTestTypes();  // read once per process
  return selected[type];
}

// One collective on its own: prepare, post, destroy the operator as soon as
// the call returned (NCCL allows it), synchronize, verify.
void runOne(World& w, const CollSpec& spec, const SharedScalarOp* shared = nullptr) {
  CollRun run(w, spec);
  if (!run.prepare(w.comm, shared)) return;
  run.post(w.comm, w.stream);
  run.releaseOp(w.comm);
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  run.verify();
}

// ---- a batch: collectives and point-to-point in one group ------------------

// One entry of a batch: a collective, or a message from `sender` to
// `receiver` (this rank holds the halves it takes part in).
struct Item {
  std::unique_ptr<CollRun> coll;
  bool prepared = false;
  int sender = -1, receiver = -1;
  std::unique_ptr<Message> out, in;
};

Item p2pItem(const World& w, uint64_t tag, int sender, int receiver, size_t bytes,
             BufferKind kind) {
  Item it;
  it.sender = sender;
  it.receiver = receiver;
  if (w.rank == sender) {
    it.out = std::make_unique<Message>(w, tag, sender, receiver, bytes, kind);
    it.out->fillAsSender();
  }
  if (w.rank == receiver) {
    it.in = std::make_unique<Message>(w, tag, sender, receiver, bytes, kind);
    it.in->poison();
  }
  return it;
}

// Posts the items in `order` (indices into items), inside one group when
// `grouped`, on (comm, stream); then synchronizes and verifies everything.
void runBatch(std::vector<Item>& items, const std::vector<size_t>& order, bool grouped,
              ncclComm_t comm, cudaStream_t stream) {
  for (Item& it : items) {
    if (it.coll) it.prepared = it.coll->prepare(comm);
  }
  if (grouped) EXPECT_OK(ncclGroupStart());
  for (size_t k : order) {
    Item& it = items[k];
    if (it.coll) {
      if (it.prepared) it.coll->post(comm, stream);
      continue;
    }
    if (it.out) {
      EXPECT_OK(ncclSend(it.out->buf.data(), it.out->bytes, ncclInt8, it.receiver, comm, stream));
    }
    if (it.in) {
      EXPECT_OK(ncclRecv(it.in->buf.data(), it.in->bytes, ncclInt8, it.sender, comm, stream));
    }
  }
  if (grouped) EXPECT_OK(ncclGroupEnd());
  for (Item& it : items) {
    if (it.coll) it.coll->releaseOp(comm);
  }
  EXPECT_OK(ncclFerryStreamSynchronize(stream));
  for (Item& it : items) {
    if (it.coll) it.coll->verify();
    if (it.in) it.in->verify("point-to-point in a batch");
  }
}

std::vector<size_t> identityOrder(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

// ---- matrix ---------------------------------------------------------------

// Wrong calls fail with ncclInvalidArgument on every rank (so nothing is
// left half-posted) and do not disturb the collectives that follow.
void checkErrors(World& w) {
  const int n = w.nranks;
  TestBuffer a(64 * 8 * n, BufferKind::Plain), b(64 * 8 * n, BufferKind::Plain);
  void* s = a.data();
  void* d = b.data();
  const ncclResult_t bad = ncclInvalidArgument;
  EXPECT_RESULT(ncclRedOpDestroy(ncclSum, w.comm), bad);
  EXPECT_RESULT(ncclRedOpDestroy(ncclAvg, w.comm), bad);
  EXPECT_RESULT(ncclBroadcast(s, d, 16, ncclFloat, n, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclBroadcast(s, d, 16, ncclFloat, -1, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclBcast(s, 16, ncclInt8, n + 5, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclReduce(s, d, 16, ncclFloat, ncclSum, n, w.comm, w.stream), bad);
  EXPECT_RESULT(
      ncclAllReduce(s, d, 16, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, w.comm, w.stream),
      bad);
  EXPECT_RESULT(ncclAllGather(s, d, 16, static_cast<ncclDataType_t>(-1), w.comm, w.stream), bad);
  EXPECT_RESULT(ncclAllReduce(s, d, 16, ncclFloat, static_cast<ncclRedOp_t>(-1), w.comm, w.stream),
                bad);
  // No PreMulSum operator exists yet on this communicator: the first user
  // value is not a valid operator.
  EXPECT_RESULT(ncclReduceScatter(s, d, 16, ncclFloat, static_cast<ncclRedOp_t>(ncclNumOps), w.comm,
                                  w.stream),
                bad);
  EXPECT_RESULT(ncclAllReduce(nullptr, d, 16, ncclFloat, ncclSum, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclAllReduce(s, nullptr, 16, ncclFloat, ncclSum, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclAllGather(nullptr, d, 16, ncclFloat, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclReduceScatter(s, nullptr, 16, ncclFloat, ncclMax, w.comm, w.stream), bad);
  EXPECT_RESULT(ncclReduce(s, d, 16, ncclFloat, static_cast<ncclRedOp_t>(-1), 0, w.comm, w.stream),
                bad);
  // A PreMulSum operator serves its own datatype only.
  float scalar = 2.0f;
  ncclRedOp_t op = ncclSum;
  ncclResult_t r =
      ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, w.comm);
  EXPECT_TRUE(r == ncclSuccess, "ncclRedOpCreatePreMulSum returned %d", r);
  if (r == ncclSuccess) {
    EXPECT_RESULT(ncclAllReduce(s, d, 16, ncclDouble, op, w.comm, w.stream), bad);
    EXPECT_OK(ncclRedOpDestroy(op, w.comm));
  }
  EXPECT_RESULT(ncclRedOpCreatePreMulSum(&op, &scalar, static_cast<ncclDataType_t>(ncclNumTypes),
                                         ncclScalarHostImmediate, w.comm),
                bad);
  ncclResult_t async = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(w.comm, &async));
  EXPECT_TRUE(async == ncclSuccess, "async error %d after rejected calls", async);
  // Nothing may have been left behind: the next collective must match up.
  CollSpec after;
  after.type = ncclInt32;
  after.count = 1000;
  after.tag = 7;
  runOne(w, after);
}

struct MatrixPlan {
  std::vector<size_t> counts;
  bool bothPlacements;  // else in-place and out-of-place alternate
  size_t bigCount;      // float and bf16 sums of this count; 0: none
};

// Every reduction of one collective and one datatype over the plan's counts.
void matrixCell(World& w, const MatrixPlan& plan, Coll coll, ncclDataType_t type, uint64_t* tag,
                int* rootTurn) {
  // The device-resident PreMulSum operator is created once per cell and
  // reused with a new scalar per call: the scalar must be read at run time.
  TestBuffer scalar(8, type % 2 == 0 ? BufferKind::Mapped : BufferKind::Plain);
  SharedScalarOp shared;
  shared.scalar = &scalar;
  bool haveShared = false;
  if (isReducing(coll)) {
    ncclResult_t r =
        ncclRedOpCreatePreMulSum(&shared.op, scalar.data(), type, ncclScalarDevice, w.comm);
    EXPECT_TRUE(r == ncclSuccess, "%s %s: ncclRedOpCreatePreMulSum (device scalar) returned %d",
                collName(coll), dataTypeName(type), r);
    haveShared = r == ncclSuccess;
  }
  const size_t nreds = isReducing(coll) ? std::size(kAllReds) : 1;
  for (size_t ri = 0; ri < nreds; ++ri) {
    for (size_t ci = 0; ci < plan.counts.size(); ++ci) {
      for (int place = 0; place < 2; ++place) {
        if (!plan.bothPlacements && place == 1) break;
        CollSpec s;
        s.coll = coll;
        s.type = type;
        s.red = kAllReds[ri];
        s.count = plan.counts[ci];
        s.root = (*rootTurn)++ % w.nranks;
        s.inPlace = plan.bothPlacements ? place == 1 : (*tag % 2 == 1);
        s.exact = (ci + place) % 2 == 0;
        s.kind = *tag % 3 == 0 ? BufferKind::Mapped : BufferKind::Plain;
        s.tag = (*tag)++;
        if (s.red == Red::PreMulDevice && !haveShared) continue;  // counted above
        runOne(w, s, s.red == Red::PreMulDevice ? &shared : nullptr);
      }
    }
  }
  if (haveShared) EXPECT_OK(ncclRedOpDestroy(shared.op, w.comm));
}

void runMatrix(World& w, const MatrixPlan& plan) {
  checkErrors(w);
  uint64_t tag = 1000;
  int rootTurn = 0;
  for (Coll coll : kAllColls) {
    for (int t = 0; t < ncclNumTypes && !plan.counts.empty(); ++t) {
      if (!typeSelected(static_cast<ncclDataType_t>(t))) continue;
      auto start = Clock::now();
      matrixCell(w, plan, coll, static_cast<ncclDataType_t>(t), &tag, &rootTurn);
      if (w.rank == 0) {
        printf("%s %s: %.2f s\n", collName(coll), dataTypeName(static_cast<ncclDataType_t>(t)),
               secondsSince(start));
      }
      if (anyRankOver(w, kFailureLimit)) return;
    }
  }
  if (plan.bigCount == 0) return;
  for (Coll coll : kAllColls) {
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
      for (int place = 0; place < 2; ++place) {
        CollSpec s;
        s.coll = coll;
        s.type = type;
        s.count = plan.bigCount;
        s.root = (rootTurn++) % w.nranks;
        s.inPlace = place == 1;
        s.exact = place == 0;
        s.kind = place == 0 ? BufferKind::Mapped : BufferKind::Plain;
        s.tag = tag++;
        auto start = Clock::now();
        runOne(w, s);
        if (w.rank == 0) printf("%s: %.2f s\n", describe(s).c_str(), secondsSince(start));
      }
    }
    if (anyRankOver(w, kFailureLimit)) return;
  }
}

void caseMatrix(World& w) {
  announce(w, "matrix");
  runMatrix(w, MatrixPlan{{0, 1, 7, 131, 4099}, true, (size_t{1} << 20) + 3});
}

// The matrix without the large counts, whose host references cost seconds
// per rank: for many ranks on few cores.
void caseMatrixQuick(World& w) {
  announce(w, "matrix_quick");
  runMatrix(w, MatrixPlan{{0, 1, 7, 131, 4099}, true, 0});
}

// Float and bf16 sums of 2^24 + 5 elements (GPU).
void caseBig(World& w) {
  announce(w, "big");
  runMatrix(w, MatrixPlan{{}, false, (size_t{1} << 24) + 5});
}

// ---- stress and mixed -------------------------------------------------------

// 2,000 operations (FERRY_TEST_ROUNDS): the five collectives with random types, operators,
// counts (up to 64K), roots and placements, and point-to-point messages
// between random pairs (self included), in groups of 1-6.
void caseStress(World& w) {
  announce(w, "stress");
  const int n = w.nranks;
  Rng rng(w.seed, 0x57E55);
  uint64_t tag = 100000;
  int ops = 0, groups = 0;
  const int total = testRounds(2000);
  while (ops < total) {
    const int size = 1 + static_cast<int>(rng.below(6));
    const bool groupAlone = rng.below(2) == 0;
    std::vector<Item> items;
    bool self = false;
    for (int k = 0; k < size; ++k, ++tag) {
      if (rng.below(10) < 3) {
        int s = static_cast<int>(rng.below(n)), r = static_cast<int>(rng.below(n));
        size_t bytes = randomCount(rng, 256 << 10);
        BufferKind kind = rng.below(3) == 0 ? BufferKind::Mapped : BufferKind::Plain;
        self = self || s == r;
        items.push_back(p2pItem(w, tag, s, r, bytes, kind));
      } else {
        Item it;
        it.coll = std::make_unique<CollRun>(w, randomSpec(rng, n, 64 << 10, tag));
        items.push_back(std::move(it));
      }
    }
    // A single operation goes ungrouped half the time (a self-message
    // always needs the group for its two halves).
    const bool grouped = size > 1 || self || groupAlone;
    runBatch(items, identityOrder(items.size()), grouped, w.comm, w.stream);
    ops += size;
    if (++groups % 25 == 0 && anyRankOver(w, kFailureLimit)) return;
  }
  if (w.rank == 0) printf("stress: %d operations in %d groups\n", ops, groups);
}

// 1,000 groups (FERRY_TEST_ROUNDS), each one all-reduce plus messages between random pairs of
// distinct ranks (sizes 0..64 KiB), posted in a different order on each rank.
void caseMixed(World& w) {
  announce(w, "mixed");
  const int n = w.nranks;
  Rng rng(w.seed, 0x313ED);
  const int groups = testRounds(1000);
  for (int g = 0; g < groups; ++g) {
    const uint64_t base = 200000 + static_cast<uint64_t>(g) * 1024;
    std::vector<Item> items;
    CollSpec spec = randomSpec(rng, n, 16 << 10, base);
    spec.coll = Coll::AllReduce;
    Item ar;
    ar.coll = std::make_unique<CollRun>(w, spec);
    items.push_back(std::move(ar));
    uint64_t tag = base + 1;
    for (int s = 0; s < n; ++s) {
      for (int r = 0; r < n; ++r, ++tag) {
        if (s == r || rng.below(2) == 0) continue;
        size_t bytes = rng.below(8) == 0 ? 0 : rng.below((64 << 10) + 1);
        BufferKind kind = rng.below(4) == 0 ? BufferKind::Mapped : BufferKind::Plain;
        items.push_back(p2pItem(w, tag, s, r, bytes, kind));
      }
    }
    std::vector<size_t> order = identityOrder(items.size());
    Rng shuffle(w.seed ^ static_cast<uint64_t>(g), 5000 + static_cast<uint64_t>(w.rank));
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[shuffle.below(i + 1)]);
    runBatch(items, order, true, w.comm, w.stream);
    if (g % 50 == 49 && anyRankOver(w, kFailureLimit)) return;
  }
}

// ---- streams ----------------------------------------------------------------

// A second user stream: on CUDA a plain cudaStreamCreate stream (what
// frameworks pass), on the host runtime an emulated one.
cudaStream_t createOtherStream() {
  cudaStream_t s = nullptr;
#ifdef FERRY_TEST_CUDA
  if (onCuda()) {
    EXPECT_TRUE(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate failed");
    return s;
  }
#endif
  EXPECT_OK(ncclFerryStreamCreate(&s));
  return s;
}

void destroyOtherStream(cudaStream_t s) {
#ifdef FERRY_TEST_CUDA
  if (onCuda()) {
    EXPECT_TRUE(cudaStreamDestroy(s) == cudaSuccess, "cudaStreamDestroy failed");
    return;
  }
#endif
  EXPECT_OK(ncclFerryStreamDestroy(s));
}

struct Lane {
  ncclComm_t comm;
  cudaStream_t stream;
};

// Batches of `perBatch` collectives posted one by one without synchronizing,
// operation k on lanes[k % lanes.size()]; then every lane is synchronized and
// every result verified.
void interleave(World& w, Rng& rng, const std::vector<Lane>& lanes, int batches, int perBatch,
                uint64_t* tag) {
  for (int b = 0; b < batches; ++b) {
    std::vector<std::unique_ptr<CollRun>> runs;
    std::vector<bool> prepared;
    for (int k = 0; k < perBatch; ++k) {
      runs.push_back(std::make_unique<CollRun>(w, randomSpec(rng, w.nranks, 8192, (*tag)++)));
      prepared.push_back(runs.back()->prepare(lanes[k % lanes.size()].comm));
    }
    for (int k = 0; k < perBatch; ++k) {
      const Lane& lane = lanes[k % lanes.size()];
      if (prepared[k]) runs[k]->post(lane.comm, lane.stream);
      runs[k]->releaseOp(lane.comm);
    }
    for (const Lane& lane : lanes) EXPECT_OK(ncclFerryStreamSynchronize(lane.stream));
    for (auto& run : runs) run->verify();
    if (anyRankOver(w, kFailureLimit)) return;
  }
}

void caseStreams(World& w) {
  announce(w, "streams");
  cudaStream_t other = createOtherStream();
  Rng rng(w.seed, 0x57AEA);
  uint64_t tag = 300000;
  World split = w.split();
  if (other != nullptr && split.comm != nullptr) {
    // One communicator, operations alternating between two streams.
    interleave(w, rng, {{w.comm, w.stream}, {w.comm, other}}, 16, 8, &tag);
    // Two communicators over the same ranks, each on its own stream.
    interleave(w, rng, {{w.comm, w.stream}, {split.comm, other}}, 16, 8, &tag);
    // Two communicators on one stream, and the split one across both.
    interleave(w, rng, {{split.comm, w.stream}, {w.comm, w.stream}, {split.comm, other}}, 6, 9,
               &tag);
  }
  split.destroy();
  if (other != nullptr) destroyOtherStream(other);
}

// ---- abort ------------------------------------------------------------------

// Rank 1 never joins an all-reduce the others posted; after a short wait,
// spent polling the communicator, every rank aborts. Abort and the stream
// synchronization after it must return promptly.
void caseAbort(World& w) {
  announce(w, "abort");
  if (w.nranks < 2) return;
  CollSpec spec;
  spec.count = 1 << 20;
  spec.tag = 400000;
  runOne(w, spec);  // every rank joins: connections exist, so posting only enqueues
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  spec.tag++;
  std::unique_ptr<CollRun> orphan;
  if (w.rank != 1) {
    orphan = std::make_unique<CollRun>(w, spec);
    if (orphan->prepare(w.comm)) orphan->post(w.comm, w.stream);
  }
  ncclResult_t async = ncclSuccess;
  for (auto start = Clock::now(); secondsSince(start) < 0.3;) {
    EXPECT_OK(ncclCommGetAsyncError(w.comm, &async));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto start = Clock::now();
  EXPECT_OK(ncclCommAbort(w.comm));
  w.comm = nullptr;
  ncclResult_t synced = ncclFerryStreamSynchronize(w.stream);
  double s = secondsSince(start);
  printf("rank %d: abort with %s returned in %.3f s (async error before: %s; stream sync: %s)\n",
         w.rank, orphan ? "an all-reduce in flight" : "nothing posted", s,
         ncclGetErrorString(async), ncclGetErrorString(synced));
  EXPECT_TRUE(s < 5.0, "abort and stream synchronization took %.2f s", s);
}

// ---- timeout ----------------------------------------------------------------

// Rank 1 never joins an all-reduce of 1,000 floats (LL by default; the FIFO
// protocol with FERRY_COLL_LL_MAX_BYTES=0). With FERRY_COLL_TIMEOUT=2 the
// others' streams must fail, not hang, in about that time; then everyone
// aborts.
void caseCollTimeout(World& w) {
  announce(w, "timeout");
  if (w.nranks < 2) return;
  CollSpec spec;
  spec.count = 1000;
  spec.tag = 500000;
  runOne(w, spec);  // a good one first: the ring is in use
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  spec.tag++;
  if (w.rank != 1) {
    CollRun orphan(w, spec);
    auto start = Clock::now();
    if (orphan.prepare(w.comm) && orphan.post(w.comm, w.stream)) {
      const ncclResult_t synced = ncclFerryStreamSynchronize(w.stream);
      const double s = secondsSince(start);
      printf("rank %d: stream of an all-reduce without rank 1: %s after %.2f s\n", w.rank,
             ncclGetErrorString(synced), s);
      EXPECT_TRUE(synced != ncclSuccess, "a collective whose peer never came completed");
      EXPECT_TRUE(s > 1.5 && s < 60.0, "failed after %.2f s with FERRY_COLL_TIMEOUT=2", s);
    }
  }
  // Rank 1 waits here while the others time out.
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  EXPECT_OK(ncclCommAbort(w.comm));
  w.comm = nullptr;
}

// ---- hier -------------------------------------------------------------------

// All-reduces of every operator over counts around multiples of 2, 3 and 4
// (ranks per host: the hierarchical path's shards and its remainder of
// count % ranks-per-host elements), in and out of place, for seven types.
// Then which algorithm ran (ncclFerryCommAlgoStats): with
// FERRY_TEST_EXPECT_HIER=1 every all-reduce hierarchically, with 0 none
// (a shape it cannot serve).
void caseHier(World& w) {
  announce(w, "hier");
  const size_t counts[] = {1, 2, 3, 4, 5, 6, 7, 12, 13, 24, 1001, 4096, 65537};
  const ncclDataType_t types[] = {ncclInt8,    ncclUint32,  ncclInt64,   ncclFloat16,
                                  ncclFloat32, ncclFloat64, ncclBfloat16};
  unsigned long long ring0 = 0, hier0 = 0;
  EXPECT_OK(ncclFerryCommAlgoStats(w.comm, &ring0, &hier0));
  uint64_t tag = 500000;
  unsigned long long posted = 0;
  for (ncclDataType_t type : types) {
    if (!typeSelected(type)) continue;
    for (Red red : kAllReds) {
      for (size_t count : counts) {
        CollSpec s;
        s.coll = Coll::AllReduce;
        s.type = type;
        s.red = red;
        s.count = count;
        s.inPlace = tag % 2 == 1;
        s.exact = tag % 3 != 0;
        s.kind = tag % 5 == 0 ? BufferKind::Mapped : BufferKind::Plain;
        s.tag = tag++;
        runOne(w, s);
        ++posted;
      }
    }
    if (anyRankOver(w, kFailureLimit)) return;
  }
  unsigned long long ring1 = 0, hier1 = 0;
  EXPECT_OK(ncclFerryCommAlgoStats(w.comm, &ring1, &hier1));
  if (w.rank == 0) {
    printf("hier: %llu all-reduces, %llu on the ring, %llu hierarchical\n", posted, ring1 - ring0,
           hier1 - hier0);
  }
  const char* expect = getenv("FERRY_TEST_EXPECT_HIER");
  if (expect == nullptr) return;
  const unsigned long long want = atoi(expect) != 0 ? posted : 0;
  EXPECT_TRUE(hier1 - hier0 == want && ring1 - ring0 == posted - want,
              "%llu all-reduces: %llu hierarchical, %llu on the ring (want %llu hierarchical)",
              posted, hier1 - hier0, ring1 - ring0, want);
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<void(World&)>> cases = {
      {"matrix", caseMatrix}, {"matrix_quick", caseMatrixQuick},
      {"big", caseBig},       {"stress", caseStress},
      {"mixed", caseMixed},   {"streams", caseStreams},
      {"abort", caseAbort},   {"timeout", caseCollTimeout},
      {"hier", caseHier},
  };
  int rc = runCase(argc, argv, cases);
  printf("%llu collectives verified\n", static_cast<unsigned long long>(verifiedCount()));
  return rc;
}
