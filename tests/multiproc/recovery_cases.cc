// The recovery and planning API of NCCL 2.28 across real processes (under
// ferry-run, on the host runtime or on GPUs): ncclCommShrink,
// ncclCommRevoke, ncclCommInitRankScalable and ncclGroupSimulateEnd. Every
// new communicator is checked with an all-reduce of fresh data against a sum
// computed here; outputs are poisoned first. Buffers are device memory on
// CUDA (TestBuffer). (A shrink after a peer died: peer_death.cc.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/proc.h"
#include "common/random.h"
#include "ferry.h"
#include "mp_cases.h"
#include "mp_check.h"
#include "nccl.h"

namespace {

using ferry::test::BufferKind;
using ferry::test::gFailures;
using ferry::test::TestBuffer;

using Ctx = ferry::test::CaseCtx;
using ferry::test::agreedSeed;
using ferry::test::worldComm;

// Rank `who`'s contribution, a function of the round's seed (integers, so
// float sums are exact in any order).
float valueOf(uint64_t seed, int who, size_t i) {
  uint64_t h = seed * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 31;
  return static_cast<float>((h + static_cast<uint64_t>(who) * 7919 + i * 31) % 1000) - 500.0f;
}

// A buffer the library accepts on either runtime, holding `host`'s values.
template <typename T>
std::unique_ptr<TestBuffer> bufferOf(const std::vector<T>& host) {
  auto b = std::make_unique<TestBuffer>(host.size() * sizeof(T), BufferKind::Plain);
  b->upload(host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> contents(const TestBuffer& b) {
  std::vector<T> host(b.size() / sizeof(T));
  b.download(host.data(), host.size() * sizeof(T));
  return host;
}

// An all-reduce over `comm` whose ranks are the parent ranks `members`
// (member i is the comm's rank i); checks every element.
void checkAllReduce(ncclComm_t comm, const std::vector<int>& members, uint64_t seed,
                    const char* what) {
  int rank = -1, count = -1;
  EXPECT_OK(ncclCommUserRank(comm, &rank));
  EXPECT_OK(ncclCommCount(comm, &count));
  EXPECT_TRUE(count == static_cast<int>(members.size()), "%s: %d ranks, expected %zu", what, count,
              members.size());
  if (rank < 0 || rank >= static_cast<int>(members.size())) return;
  const size_t n = 4099;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = valueOf(seed, members[rank], i);
  auto in = bufferOf(host);
  auto outBuf = bufferOf(std::vector<float>(n, -1e30f));
  EXPECT_OK(ncclAllReduce(in->data(), outBuf->data(), n, ncclFloat, ncclSum, comm, nullptr));
  EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
  const std::vector<float> out = contents<float>(*outBuf);
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int m : members) want += valueOf(seed, m, i);
    if (out[i] != want && bad++ < 3) {
      EXPECT_TRUE(false, "%s: element %zu is %g, expected %g", what, i, out[i], want);
    }
  }
}

std::vector<int> allRanks(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// Ids made by ranks 0..nId-1 (each root in its own process), shared over
// `world`.
std::vector<ncclUniqueId> spreadIds(ncclComm_t world, int me, int n, int nId) {
  // Under ferry-run NCCL_COMM_ID names the world's root: every id made with
  // it would be that one. The world exists now; later ids are fresh.
  unsetenv("NCCL_COMM_ID");
  std::vector<ncclUniqueId> ids(n);
  memset(ids.data(), 0, sizeof(ncclUniqueId) * n);
  if (me < nId) EXPECT_OK(ncclGetUniqueId(&ids[me]));
  EXPECT_OK(ncclFerryBootstrapAllGather(world, ids.data(), sizeof(ncclUniqueId)));
  ids.resize(nId);
  return ids;
}

void caseScalable(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  std::vector<int> counts = {1, 2, n};
  if (n >= 5) counts.push_back(3);
  uint64_t round = agreedSeed(world, ctx);
  for (int nId : counts) {
    if (nId > n) continue;
    std::vector<ncclUniqueId> ids = spreadIds(world, me, n, nId);
    ncclComm_t c = nullptr;
    EXPECT_OK(ncclCommInitRankScalable(&c, n, me, nId, ids.data(), nullptr));
    std::string what = "scalable nId=" + std::to_string(nId);
    checkAllReduce(c, allRanks(n), ++round, what.c_str());
    EXPECT_OK(ncclCommDestroy(c));
  }
  // Bad arguments fail on every rank at once, before any communication.
  std::vector<ncclUniqueId> ids = spreadIds(world, me, n, 1);
  ncclComm_t c = nullptr;
  EXPECT_RESULT(ncclCommInitRankScalable(&c, n, me, 0, ids.data(), nullptr), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommInitRankScalable(&c, n, me, n + 1, ids.data(), nullptr),
                ncclInvalidArgument);
  EXPECT_RESULT(ncclCommInitRankScalable(&c, n, me, 1, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommInitRankScalable(nullptr, n, me, 1, ids.data(), nullptr),
                ncclInvalidArgument);
  EXPECT_RESULT(ncclCommInitRankScalable(&c, n, n, 1, ids.data(), nullptr), ncclInvalidArgument);
  EXPECT_OK(ncclCommDestroy(world));
}

void shrinkBadArgs(ncclComm_t world, int n) {
  ncclComm_t c = nullptr;
  int one[] = {0};
  int outOfRange[] = {n};
  int twice[] = {0, 0};
  std::vector<int> everyone = allRanks(n);
  EXPECT_RESULT(ncclCommShrink(world, one, 1, nullptr, nullptr, 0), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(world, one, -1, &c, nullptr, 0), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(world, nullptr, 1, &c, nullptr, 0), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(world, outOfRange, 1, &c, nullptr, 0), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(world, twice, 2, &c, nullptr, 0), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(world, everyone.data(), n, &c, nullptr, 0), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(world, one, 1, &c, nullptr, 0x4), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommShrink(nullptr, one, 1, &c, nullptr, 0), ncclInvalidArgument);
}

void caseShrink(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  const uint64_t seed = agreedSeed(world, ctx);
  shrinkBadArgs(world, n);
  checkAllReduce(world, allRanks(n), seed, "world before shrinking");
  // Rank 1 leaves; it calls too and gets no communicator.
  int drop1[] = {1};
  ncclComm_t c = nullptr;
  EXPECT_OK(ncclCommShrink(world, drop1, 1, &c, nullptr, NCCL_SHRINK_DEFAULT));
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (r != 1) members.push_back(r);
  if (me == 1) {
    EXPECT_TRUE(c == nullptr, "an excluded rank got a communicator");
  } else {
    checkAllReduce(c, members, seed + 1, "shrunk without rank 1");
    EXPECT_OK(ncclCommDestroy(c));
  }
  // The parent still works after a default shrink.
  checkAllReduce(world, allRanks(n), seed + 2, "world after a default shrink");

  // With NCCL_SHRINK_ABORT a message in flight to an excluded rank (who
  // never receives it) is stopped, and the parent is revoked.
  // With two ranks (two GPUs) only rank 0 is dropped.
  std::vector<int> dropped = {0};
  if (n > 2) dropped.push_back(n - 1);
  cudaStream_t s = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&s));
  auto pending = bufferOf(std::vector<char>(1 << 20, 5));
  // First a checked message from rank 1 to rank 0: kernel p2p connects on
  // first use, which needs the receiver's communicator alive, and rank 0
  // may have destroyed it by the time rank 1 sends the pending one.
  std::vector<char> hello(4096);
  for (size_t i = 0; i < hello.size(); ++i) hello[i] = static_cast<char>((seed >> (i % 56)) + i);
  auto helloBuf = bufferOf(hello);
  auto heard = bufferOf(std::vector<char>(hello.size(), 0));
  if (me == 1) EXPECT_OK(ncclSend(helloBuf->data(), hello.size(), ncclChar, 0, world, s));
  if (me == 0) EXPECT_OK(ncclRecv(heard->data(), hello.size(), ncclChar, 1, world, s));
  EXPECT_OK(ncclFerryStreamSynchronize(s));
  EXPECT_TRUE(me != 0 || contents<char>(*heard) == hello,
              "rank 0 got a different message from rank 1");
  if (me == 1) EXPECT_OK(ncclSend(pending->data(), pending->size(), ncclChar, 0, world, s));
  c = nullptr;
  EXPECT_OK(ncclCommShrink(world, dropped.data(), static_cast<int>(dropped.size()), &c, nullptr,
                           NCCL_SHRINK_ABORT));
  EXPECT_OK(ncclFerryStreamSynchronize(s));  // released, not hung
  members.clear();
  for (int r = 0; r < n; ++r) {
    if (std::find(dropped.begin(), dropped.end(), r) == dropped.end()) members.push_back(r);
  }
  if (std::find(dropped.begin(), dropped.end(), me) != dropped.end()) {
    EXPECT_TRUE(c == nullptr, "an excluded rank got a communicator");
  } else {
    checkAllReduce(c, members, seed + 3, "shrunk without the dropped ranks");
    EXPECT_OK(ncclCommDestroy(c));
  }
  auto x = bufferOf(std::vector<float>(8, 1.0f));
  EXPECT_RESULT(ncclAllReduce(x->data(), x->data(), 8, ncclFloat, ncclSum, world, nullptr),
                ncclInvalidUsage);
  EXPECT_OK(ncclFerryStreamDestroy(s));
  EXPECT_OK(ncclCommDestroy(world));
}

void caseRevoke(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  const uint64_t seed = agreedSeed(world, ctx);
  EXPECT_RESULT(ncclCommRevoke(world, 1), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommRevoke(nullptr, 0), ncclInvalidArgument);
  checkAllReduce(world, allRanks(n), seed, "world before revoking");
  // Rank 0 waits for a message rank 1 never sends: revoke releases it.
  cudaStream_t s = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&s));
  auto buf = bufferOf(std::vector<char>(1 << 20, 0));
  if (me == 0) EXPECT_OK(ncclRecv(buf->data(), buf->size(), ncclChar, 1, world, s));
  auto t0 = ferry::test::Clock::now();
  EXPECT_OK(ncclCommRevoke(world, NCCL_REVOKE_DEFAULT));
  EXPECT_OK(ncclFerryStreamSynchronize(s));
  EXPECT_TRUE(ferry::test::secondsSince(t0) < 10.0, "revoke took %.1f s",
              ferry::test::secondsSince(t0));
  EXPECT_OK(ncclCommRevoke(world, 0));  // again: a no-op
  ncclResult_t state = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(world, &state));
  EXPECT_TRUE(state == ncclSuccess, "async error %d after revoke", state);
  auto x = bufferOf(std::vector<float>(8, 1.0f));
  EXPECT_RESULT(ncclAllReduce(x->data(), x->data(), 8, ncclFloat, ncclSum, world, nullptr),
                ncclInvalidUsage);
  EXPECT_RESULT(ncclSend(x->data(), 8, ncclFloat, (me + 1) % n, world, nullptr), ncclInvalidUsage);
  EXPECT_RESULT(ncclCommFinalize(world), ncclInvalidUsage);
  // A revoked communicator can still be split (and destroyed).
  ncclComm_t c = nullptr;
  EXPECT_OK(ncclCommSplit(world, 0, me, &c, nullptr));
  checkAllReduce(c, allRanks(n), seed + 1, "split of a revoked communicator");
  EXPECT_OK(ncclCommDestroy(c));
  EXPECT_OK(ncclFerryStreamDestroy(s));
  EXPECT_OK(ncclCommDestroy(world));
}

// One simulated group: an all-reduce of `count` floats and a ring exchange
// of `bytes`; returns the estimate and checks nothing ran.
float simulate(ncclComm_t world, int me, int n, size_t count, size_t bytes) {
  auto in = bufferOf(std::vector<float>(count, 1.0f));
  auto out = bufferOf(std::vector<float>(count, -3.0f));
  auto sendBuf = bufferOf(std::vector<char>(bytes, 1));
  auto recvBuf = bufferOf(std::vector<char>(bytes, 9));
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclAllReduce(in->data(), out->data(), count, ncclFloat, ncclSum, world, nullptr));
  EXPECT_OK(ncclSend(sendBuf->data(), bytes, ncclChar, (me + 1) % n, world, nullptr));
  EXPECT_OK(ncclRecv(recvBuf->data(), bytes, ncclChar, (me + n - 1) % n, world, nullptr));
  EXPECT_OK(ncclGroupSimulateEnd(&info));
  EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
  const std::vector<float> outHost = contents<float>(*out);
  const std::vector<char> recvHost = contents<char>(*recvBuf);
  EXPECT_TRUE(outHost[0] == -3.0f && outHost[count - 1] == -3.0f && recvHost[0] == 9 &&
                  recvHost[bytes - 1] == 9,
              "a simulated group ran its operations");
  EXPECT_TRUE(std::isfinite(info.estimatedTime) && info.estimatedTime > 0, "estimated time %g",
              info.estimatedTime);
  return info.estimatedTime;
}

void caseSimulate(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  const uint64_t seed = agreedSeed(world, ctx);
  float small = simulate(world, me, n, 1024, 4096);
  float large = simulate(world, me, n, 16 << 20, 64 << 20);
  printf("rank %d: estimated %.1f us (4 KiB) and %.1f us (64 MiB)\n", me, small, large);
  EXPECT_TRUE(large > small, "a larger group is not estimated slower (%g vs %g)", large, small);
  // Bad arguments, and no group to end.
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  ncclSimInfo_t raw;
  memset(&raw, 0, sizeof(raw));
  EXPECT_RESULT(ncclGroupSimulateEnd(nullptr), ncclInvalidArgument);
  EXPECT_RESULT(ncclGroupSimulateEnd(&raw), ncclInvalidArgument);
  EXPECT_RESULT(ncclGroupSimulateEnd(&info), ncclInvalidUsage);
  // Nested: the inner simulated end only closes a level; the outer end runs.
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclGroupStart());
  std::vector<int> members = allRanks(n);
  const size_t count = 513;
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = valueOf(seed, me, i);
  auto in = bufferOf(mine);
  auto outBuf = bufferOf(std::vector<float>(count, -1e30f));
  EXPECT_OK(ncclAllReduce(in->data(), outBuf->data(), count, ncclFloat, ncclSum, world, nullptr));
  EXPECT_OK(ncclGroupSimulateEnd(&info));
  EXPECT_TRUE(info.estimatedTime == 0, "nested estimate %g", info.estimatedTime);
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
  const std::vector<float> out = contents<float>(*outBuf);
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int m : members) want += valueOf(seed, m, i);
    if (out[i] != want) {
      EXPECT_TRUE(false, "element %zu is %g, expected %g", i, out[i], want);
      break;
    }
  }
  EXPECT_OK(ncclCommDestroy(world));
}

}  // namespace

int main(int argc, char** argv) {
  return ferry::test::runCases(argc, argv,
                               {
                                   {"scalable", caseScalable},
                                   {"shrink", caseShrink},
                                   {"revoke", caseRevoke},
                                   {"simulate", caseSimulate},
                               });
}
