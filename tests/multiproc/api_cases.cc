// Multi-process tests of the public API on the host runtime, one program with
// one case per argument, run under ferry-run with 1-8 ranks (api.cmake).
// Uses only nccl.h / ferry.h, like a user program would.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/proc.h"
#include "common/random.h"
#include "mp_check.h"
#include "ferry.h"
#include "mp_cases.h"
#include "nccl.h"

// NCCL's device-API entry point (not in nccl.h); Ferry exports it for PyTorch.
extern "C" ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* out);

namespace {

using ferry::test::Clock;
using ferry::test::gFailures;
using ferry::test::secondsSince;

using Ctx = ferry::test::CaseCtx;
using ferry::test::worldComm;

// A fresh unique id made by rank 0 and shared over `parent`, so every
// iteration has its own root (NCCL_COMM_ID would reuse one port).
ncclUniqueId sharedFreshId(ncclComm_t parent, int rank, int nranks) {
  std::vector<ncclUniqueId> ids(nranks);
  memset(ids.data(), 0, sizeof(ncclUniqueId) * nranks);
  if (rank == 0) EXPECT_OK(ncclGetUniqueId(&ids[0]));
  EXPECT_OK(ncclFerryBootstrapAllGather(parent, ids.data(), sizeof(ncclUniqueId)));
  return ids[0];
}

// Every rank adopts rank 0's seed (seeds differ per process), so each rank
// can recompute the data any other rank generated.
uint64_t agreeSeed(ncclComm_t comm, uint64_t mine, int rank, int nranks) {
  std::vector<uint64_t> seeds(nranks, 0);
  seeds[rank] = mine;
  EXPECT_OK(ncclFerryBootstrapAllGather(comm, seeds.data(), sizeof(uint64_t)));
  return seeds[0];
}

// All-gathers random per-rank words over `comm` and checks every slot
// against what each rank's seeded stream must have produced.
void checkAllGather(ncclComm_t comm, uint64_t seed, int myRank, int nranks, uint64_t round) {
  const size_t kWords = 37;
  std::vector<uint64_t> data(kWords * nranks, 0xA5A5A5A5A5A5A5A5ULL);
  ferry::test::Rng mine(seed ^ round, static_cast<uint64_t>(myRank));
  for (size_t i = 0; i < kWords; ++i) data[myRank * kWords + i] = mine.next();
  EXPECT_OK(ncclFerryBootstrapAllGather(comm, data.data(), kWords * sizeof(uint64_t)));
  for (int r = 0; r < nranks; ++r) {
    ferry::test::Rng theirs(seed ^ round, static_cast<uint64_t>(r));
    for (size_t i = 0; i < kWords; ++i) {
      uint64_t want = theirs.next();
      EXPECT_TRUE(data[r * kWords + i] == want, "round %llu slot %d word %zu differs",
                  static_cast<unsigned long long>(round), r, i);
    }
  }
}

void caseInit(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  // Init inside a (nested) group is deferred to the outermost group end.
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclGroupStart());
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclComm_t world = nullptr;
  EXPECT_OK(ncclCommInitRank(&world, n, id, me));
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclGroupEnd());
  int count = 0, rank = -1;
  EXPECT_OK(ncclCommCount(world, &count));
  EXPECT_OK(ncclCommUserRank(world, &rank));
  EXPECT_TRUE(count == n && rank == me, "count %d rank %d", count, rank);
  const uint64_t seed = agreeSeed(world, ctx.seed, me, n);

  long rss0 = 0;
  int fds0 = 0, threads0 = 0;
  // FERRY_TEST_ROUNDS: fewer where a test only needs inits to happen (at
  // least 2: the first is the warm-up the leak check starts after).
  const int kIters = std::max(2, ferry::test::testRounds(50));
  for (int it = 0; it < kIters; ++it) {
    if (it == 1) {  // after one warm-up iteration: runtime singletons exist
      EXPECT_OK(ncclFerryBootstrapBarrier(world));
      fds0 = ferry::test::countOpenFds();
      threads0 = ferry::test::countThreads();
      rss0 = ferry::test::rssKiB();
    }
    ncclUniqueId fresh = sharedFreshId(world, me, n);
    ncclComm_t c = nullptr;
    EXPECT_OK(ncclCommInitRank(&c, n, fresh, me));
    checkAllGather(c, seed, me, n, static_cast<uint64_t>(it));
    EXPECT_OK(ncclFerryBootstrapBarrier(c));
    EXPECT_OK(ncclCommFinalize(c));
    EXPECT_OK(ncclCommDestroy(c));
  }
  EXPECT_OK(ncclFerryBootstrapBarrier(world));
  // Rank 0's last root thread may still be exiting: allow it one thread/fd.
  // The proxy closes its end of a peer's RPC connection when it sees the
  // peer close it (asynchronously, within milliseconds): wait up to 2 s
  // for the count to settle before calling anything a leak.
  int fds1 = ferry::test::countOpenFds();
  for (int i = 0; i < 200 && fds1 > fds0 + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    fds1 = ferry::test::countOpenFds();
  }
  int threads1 = ferry::test::countThreads();
  long rss1 = ferry::test::rssKiB();
  printf("after %d init/destroy: fds %d -> %d, threads %d -> %d, rss %ld -> %ld KiB\n", kIters,
         fds0, fds1, threads0, threads1, rss0, rss1);
  EXPECT_TRUE(fds1 <= fds0 + 1, "fd growth %d -> %d", fds0, fds1);
  EXPECT_TRUE(threads1 <= threads0 + 1, "thread growth %d -> %d", threads0, threads1);
  EXPECT_TRUE(rss1 - rss0 < 8 * 1024, "rss growth %ld KiB", rss1 - rss0);
  EXPECT_OK(ncclCommDestroy(world));
}

// Polls until init ends; bounded so a bug cannot hang the test.
ncclResult_t waitInit(ncclComm_t comm, double limitSeconds) {
  auto start = Clock::now();
  ncclResult_t state = ncclInProgress;
  while (secondsSince(start) < limitSeconds) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ncclInProgress;
}

void caseNonblocking(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, me, &config);
  EXPECT_TRUE(r == ncclInProgress || r == ncclSuccess, "init returned %d", r);
  EXPECT_TRUE(comm != nullptr, "no handle");
  EXPECT_RESULT(waitInit(comm, 60), ncclSuccess);
  const uint64_t seed = agreeSeed(comm, ctx.seed, me, n);
  checkAllGather(comm, seed, me, n, 1);
  // A split inherits the parent's non-blocking config.
  ncclComm_t child = nullptr;
  r = ncclCommSplit(comm, 0, me, &child, nullptr);
  EXPECT_TRUE(r == ncclInProgress || r == ncclSuccess, "split returned %d", r);
  EXPECT_RESULT(waitInit(child, 60), ncclSuccess);
  checkAllGather(child, seed, me, n, 2);
  EXPECT_OK(ncclCommDestroy(child));
  EXPECT_OK(ncclCommDestroy(comm));
}

void caseSplit(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  // Colors by rank parity; the last rank opts out when there are > 2 ranks;
  // keys reverse the order inside each color.
  auto colorOf = [n](int r) { return (n > 2 && r == n - 1) ? NCCL_SPLIT_NOCOLOR : r % 2; };
  std::vector<int> expectedMembers;  // parent ranks of my color, in new-rank order
  for (int r = n - 1; r >= 0; --r) {
    if (colorOf(r) == colorOf(me)) expectedMembers.push_back(r);
  }
  for (int variant = 0; variant < 2; ++variant) {
    ncclComm_t sub = nullptr;
    if (variant == 0) {
      EXPECT_OK(ncclCommSplit(world, colorOf(me), n - me, &sub, nullptr));
    } else {  // inside a group, with an explicit config
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.commName = "split-in-group";
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclCommSplit(world, colorOf(me), n - me, &sub, &config));
      EXPECT_OK(ncclGroupEnd());
    }
    if (colorOf(me) == NCCL_SPLIT_NOCOLOR) {
      EXPECT_TRUE(sub == nullptr, "NOCOLOR rank got a communicator");
      continue;
    }
    int count = 0, rank = -1;
    EXPECT_OK(ncclCommCount(sub, &count));
    EXPECT_OK(ncclCommUserRank(sub, &rank));
    EXPECT_TRUE(count == static_cast<int>(expectedMembers.size()), "count %d", count);
    EXPECT_TRUE(rank >= 0 && rank < count && expectedMembers[rank] == me, "rank %d", rank);
    std::vector<int> parents(count, -1);
    if (rank >= 0 && rank < count) parents[rank] = me;
    EXPECT_OK(ncclFerryBootstrapAllGather(sub, parents.data(), sizeof(int)));
    EXPECT_TRUE(parents == expectedMembers, "member order differs");
    EXPECT_OK(ncclCommDestroy(sub));
  }
  EXPECT_OK(ncclCommDestroy(world));
}

// Each rank on its own: an init that can never finish (rank 1 never comes)
// is aborted from another thread and must return promptly.
void caseAbort(const Ctx& ctx) {
  (void)ctx;
  unsetenv("NCCL_COMM_ID");
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  EXPECT_RESULT(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInProgress);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ncclResult_t state = ncclSuccess;
  EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  EXPECT_TRUE(state == ncclInProgress, "init should still be waiting, state %d", state);
  auto start = Clock::now();
  std::thread aborter([comm]() { EXPECT_OK(ncclCommAbort(comm)); });
  aborter.join();
  double s = secondsSince(start);
  printf("abort of a pending init took %.3f s\n", s);
  EXPECT_TRUE(s < 2.0, "abort took %.2f s", s);
}

// Every rank passes nranks+1: the missing rank makes init fail after the
// (shortened) bootstrap timeout, never hang.
void caseMissing(const Ctx& ctx) {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  auto start = Clock::now();
  ncclResult_t r = ncclCommInitRank(&comm, ctx.env.nranks + 1, id, ctx.env.rank);
  double s = secondsSince(start);
  printf("init with a missing rank returned %s after %.2f s\n", ncclGetErrorString(r), s);
  EXPECT_TRUE(r != ncclSuccess && r != ncclInProgress, "init returned %d", r);
  EXPECT_TRUE(s >= 1.0 && s < 30.0, "took %.2f s (timeout is 2 s)", s);
  EXPECT_OK(ncclCommAbort(comm));
}

// Inits the world communicator as `rank` with a fresh launcher id; returns
// init's result and, in *seconds, how long it took.
ncclResult_t timedInit(const Ctx& ctx, int rank, ncclComm_t* comm, double* seconds) {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  auto start = Clock::now();
  ncclResult_t r = ncclCommInitRank(comm, ctx.env.nranks, id, rank);
  *seconds = secondsSince(start);
  return r;
}

// A malformed knob (set by the test, the same on every rank) fails init on
// every rank with ncclInvalidArgument, promptly and without a hang.
void caseBadKnob(const Ctx& ctx) {
  ncclComm_t comm = nullptr;
  double s = 0;
  ncclResult_t r = timedInit(ctx, ctx.env.rank, &comm, &s);
  printf("init with a malformed knob returned %s after %.2f s\n", ncclGetErrorString(r), s);
  EXPECT_TRUE(r == ncclInvalidArgument, "init returned %d", r);
  EXPECT_TRUE(s < 30.0, "took %.2f s", s);
  EXPECT_OK(ncclCommAbort(comm));
}

// One rank sets a knob that every rank must set alike (FERRY_TEST_RANK_ENV)
// differently: init fails on every rank, soon, naming the knob.
void caseKnobMismatch(const Ctx& ctx) {
  const std::string knob = getenv("FERRY_TEST_KNOB") ? getenv("FERRY_TEST_KNOB") : "";
  EXPECT_TRUE(!knob.empty(), "FERRY_TEST_KNOB (the knob that differs) is not set");
  ncclComm_t comm = nullptr;
  double s = 0;
  ncclResult_t r = timedInit(ctx, ctx.env.rank, &comm, &s);
  const std::string why = ncclGetLastError(nullptr);
  printf("init with %s set differently returned %s after %.2f s: %s\n", knob.c_str(),
         ncclGetErrorString(r), s, why.c_str());
  EXPECT_TRUE(r == ncclInvalidUsage, "init returned %d", r);
  EXPECT_TRUE(why.find(knob + " differs between rank 0") != std::string::npos,
              "last error does not name %s: %s", knob.c_str(), why.c_str());
  EXPECT_TRUE(s < 30.0, "took %.2f s", s);
  EXPECT_OK(ncclCommAbort(comm));
}

// The last rank claims rank 0 too: nobody may end up with a communicator.
void caseDuplicateRank(const Ctx& ctx) {
  int claimed = ctx.env.rank == ctx.env.nranks - 1 ? 0 : ctx.env.rank;
  ncclComm_t comm = nullptr;
  double s = 0;
  ncclResult_t r = timedInit(ctx, claimed, &comm, &s);
  printf("init with a duplicate rank returned %s after %.2f s\n", ncclGetErrorString(r), s);
  EXPECT_TRUE(r != ncclSuccess && r != ncclInProgress, "init returned %d", r);
  EXPECT_TRUE(s < 30.0, "took %.2f s", s);
  EXPECT_OK(ncclCommAbort(comm));
}

#include "api_badargs.inc"

void caseInitAll(const Ctx& ctx) {
  int ndevAvail = 0;
  EXPECT_OK(ncclFerryGetDeviceCount(&ndevAvail));
  const int ndev = ndevAvail < 4 ? ndevAvail : 4;
  std::vector<ncclComm_t> comms(ndev, nullptr);
  std::vector<int> devs(ndev);
  for (int i = 0; i < ndev; ++i) devs[i] = ndev - 1 - i;  // reversed: order defines rank
  EXPECT_OK(ncclCommInitAll(comms.data(), ndev, devs.data()));
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i) {
    int count = 0, rank = -1, dev = -1;
    EXPECT_OK(ncclCommCount(comms[i], &count));
    EXPECT_OK(ncclCommUserRank(comms[i], &rank));
    EXPECT_OK(ncclCommCuDevice(comms[i], &dev));
    EXPECT_TRUE(count == ndev && rank == i && dev == devs[i], "comm %d: %d %d %d", i, count, rank,
                dev);
    // Bootstrap collectives block until every rank joins: one thread each.
    threads.emplace_back([&, i]() { checkAllGather(comms[i], ctx.seed, i, ndev, 3); });
  }
  for (auto& t : threads) t.join();
  for (ncclComm_t c : comms) EXPECT_OK(ncclCommDestroy(c));
  // Single-device InitAll with a NULL devlist also works.
  ncclComm_t one = nullptr;
  EXPECT_OK(ncclCommInitAll(&one, 1, nullptr));
  EXPECT_OK(ncclCommDestroy(one));
}

}  // namespace

int main(int argc, char** argv) {
  return ferry::test::runCases(argc, argv,
                               {
                                   {"init", caseInit},
                                   {"nonblocking", caseNonblocking},
                                   {"split", caseSplit},
                                   {"abort", caseAbort},
                                   {"missing", caseMissing},
                                   {"duprank", caseDuplicateRank},
                                   {"badargs", caseBadArgs},
                                   {"initall", caseInitAll},
                                   {"badknob", caseBadKnob},
                                   {"knobmismatch", caseKnobMismatch},
                               });
}
