// What communicators hold, across real processes on the host runtime (under
// ferry-run):
//   many [N]: N communicators split from the world (64 by default, PyTorch
//     makes dozens), every other one used only for point-to-point. With
//     NCCL_RUNTIME_CONNECT=1 (the default) a new one holds nothing, those
//     hold only the kernel-p2p connections to the peers they used (one
//     equal chunk per peer: a message to itself adds one), and the others
//     also the FIFOs of the protocols their collectives used (small ones
//     LL, large ones Simple); with =0 every one holds everything from init. Every message and
//     reduction is checked element-wise against values computed here; outputs are poisoned first.
//   window: ncclCommWindowRegister / Deregister: windows of ncclMemAlloc
//     memory are mapped by every peer at registration, and SM-free messages
//     between them are zero-copy; registration inside a group; a rank with
//     bad arguments (or unequal symmetric sizes) fails every rank's call and
//     the communicator keeps working; bad handles on deregistration.
//   wincoll: all-gathers and broadcasts into a symmetric window above
//     FERRY_WIN_COLL_MIN_BYTES copy straight between the windows (not the
//     ring), checked element-wise, in and out of place, every root.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
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

// Rank `who`'s element i in round `seed` (integers: float sums are exact).
float valueOf(uint64_t seed, int who, size_t i) {
  uint64_t h = (seed + static_cast<uint64_t>(who) * 0x9E3779B97F4A7C15ULL) * 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 29;
  return static_cast<float>((h + i * 131) % 2000) - 1000.0f;
}

// Each rank sends `n` fresh floats from `send` to rank `next` and receives
// rank `prev`'s into `recv` (poisoned first); checks every element.
void exchange(ncclComm_t comm, int me, int next, int prev, TestBuffer& send, TestBuffer& recv,
              size_t n, uint64_t seed, const char* what) {
  std::vector<float> out(n), in(n, -1e30f);
  for (size_t i = 0; i < n; ++i) out[i] = valueOf(seed, me, i);
  send.upload(out.data(), n * sizeof(float));
  recv.upload(in.data(), n * sizeof(float));  // poison
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(send.data(), n, ncclFloat, next, comm, nullptr));
  EXPECT_OK(ncclRecv(recv.data(), n, ncclFloat, prev, comm, nullptr));
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
  recv.download(in.data(), n * sizeof(float));
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = valueOf(seed, prev, i);
    if (in[i] != want && bad++ < 3) {
      EXPECT_TRUE(false, "%s: element %zu from rank %d is %g, expected %g", what, i, prev, in[i],
                  want);
    }
  }
}

// exchange with the ring neighbours between fresh buffers.
void checkRing(ncclComm_t comm, int me, int nranks, size_t n, uint64_t seed, const char* what) {
  TestBuffer send(n * sizeof(float), BufferKind::Plain), recv(n * sizeof(float), BufferKind::Plain);
  exchange(comm, me, (me + 1) % nranks, (me + nranks - 1) % nranks, send, recv, n, seed, what);
}

void checkAllReduce(ncclComm_t comm, int nranks, size_t n, uint64_t seed, const char* what) {
  int me = -1;
  EXPECT_OK(ncclCommUserRank(comm, &me));
  std::vector<float> in(n), out(n, -1e30f);
  for (size_t i = 0; i < n; ++i) in[i] = valueOf(seed, me, i);
  TestBuffer src(n * sizeof(float), BufferKind::Plain), dst(n * sizeof(float), BufferKind::Plain);
  src.upload(in.data(), n * sizeof(float));
  dst.upload(out.data(), n * sizeof(float));  // poison
  EXPECT_OK(ncclAllReduce(src.data(), dst.data(), n, ncclFloat, ncclSum, comm, nullptr));
  EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
  dst.download(out.data(), n * sizeof(float));
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += valueOf(seed, r, i);
    if (out[i] != want && bad++ < 3) {
      EXPECT_TRUE(false, "%s: element %zu is %g, expected %g", what, i, out[i], want);
    }
  }
}

struct Held {
  unsigned long long bytes = 0, fifo = 0, staging = 0;
};

Held heldBy(ncclComm_t comm) {
  Held h;
  EXPECT_OK(ncclFerryCommMemory(comm, &h.bytes, &h.fifo, &h.staging));
  return h;
}

void caseMany(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  const int count = ctx.args.empty() ? 64 : atoi(ctx.args[0].c_str());
  const char* rc = getenv("NCCL_RUNTIME_CONNECT");
  const bool eager = rc != nullptr && atoi(rc) == 0;
  ncclComm_t world = worldComm(ctx);
  const uint64_t seed = agreedSeed(world, ctx);
  std::vector<ncclComm_t> comms(count, nullptr);
  auto start = ferry::test::Clock::now();
  for (int i = 0; i < count; ++i) EXPECT_OK(ncclCommSplit(world, 0, me, &comms[i], nullptr));
  const double setup = ferry::test::secondsSince(start);
  // Before any traffic: the same holdings everywhere.
  const Held first = heldBy(comms[0]);
  EXPECT_TRUE(eager ? first.fifo > 0 : first.fifo == 0,
              "a new communicator holds %llu bytes of collective FIFOs (eager %d)", first.fifo,
              eager ? 1 : 0);
  // Every rank reads its holdings before any rank's first traffic: a peer
  // that starts comm 0's ring first connects this rank's side of it too
  // (its proxy answers), which once read as "a new communicator holds
  // 561152 bytes" (CI, session 38).
  std::vector<uint64_t> barrier(static_cast<size_t>(n), 0);
  EXPECT_OK(ncclFerryBootstrapAllGather(world, barrier.data(), sizeof(uint64_t)));
  // Comm i: i % 4 == 0 or 2: point-to-point only; 1: a small all-reduce
  // too (LL); 3: a small and a large one (LL and Simple: above
  // FERRY_COLL_LL_MAX_BYTES' 1 MiB).
  for (int i = 0; i < count; ++i) {
    char what[64];
    snprintf(what, sizeof(what), "comm %d", i);
    const uint64_t round = seed + static_cast<uint64_t>(i) * 1000003;
    if (i % 2 == 1) checkAllReduce(comms[i], n, 1000 + static_cast<size_t>(i) * 7, round, what);
    if (i % 4 == 3) checkAllReduce(comms[i], n, (size_t{5} << 18) + i, round + 2, what);
    checkRing(comms[i], me, n, 777 + static_cast<size_t>(i) * 13, round + 1, what);
  }
  unsigned long long total = 0, p2pOnly = 0, llOnly = 0, both = 0;
  // Lazily, a communicator holds nothing at init (collective rings and
  // kernel-p2p connections come with their first use).
  EXPECT_TRUE(eager || first.bytes == 0, "a new communicator holds %llu bytes", first.bytes);
  const unsigned long long p2pFirst = heldBy(comms[0]).bytes;
  for (int i = 0; i < count; ++i) {
    const Held h = heldBy(comms[i]);
    total += h.bytes;
    if (eager) {
      EXPECT_TRUE(h.bytes == first.bytes && h.fifo == first.fifo,
                  "comm %d holds %llu bytes (%llu of FIFOs), %llu at init", i, h.bytes, h.fifo,
                  first.bytes);
      p2pOnly = llOnly = both = h.bytes;
    } else if (i % 2 == 0) {
      // The kernel-p2p connections to the ring neighbours, the same in
      // every such communicator.
      EXPECT_TRUE(h.fifo == 0 && h.bytes == p2pFirst,
                  "p2p-only comm %d holds %llu bytes (%llu of collective FIFOs; comm 0 %llu)", i,
                  h.bytes, h.fifo, p2pFirst);
      p2pOnly = h.bytes;
    } else {
      // The connections plus the ring(s) of the protocol(s) used.
      EXPECT_TRUE(h.fifo > 0 && h.bytes >= p2pFirst + h.fifo,
                  "comm %d ran collectives and holds %llu bytes (%llu of FIFOs; p2p-only %llu)", i,
                  h.bytes, h.fifo, p2pFirst);
      (i % 4 == 1 ? llOnly : both) = h.bytes;
    }
  }
  // Across hosts there is no kernel p2p by default (nothing held for it)
  // and no LL (FERRY_COLL_NET_LL_MAX_BYTES=0: small collectives use Simple).
  const bool oneHost = eager ? first.bytes > 0 : p2pOnly > 0;
  EXPECT_TRUE(
      eager || count < 4 || (p2pOnly < llOnly && (oneHost ? llOnly < both : llOnly == both)),
      "held: p2p-only %llu, LL collectives %llu, both protocols %llu bytes", p2pOnly, llOnly, both);
  if (!eager && oneHost) {
    // Per peer: comm 0 connected to its ring neighbours (1 peer for 2
    // ranks, 2 for more); a message to itself adds one connection of the
    // same size.
    const unsigned long long peers = n == 2 ? 1 : 2;
    const unsigned long long chunk = p2pFirst / peers;
    TestBuffer send(4096, BufferKind::Plain), recv(4096, BufferKind::Plain);
    exchange(comms[0], me, me, me, send, recv, 1000, seed + 17, "self");
    const unsigned long long after = heldBy(comms[0]).bytes;
    EXPECT_TRUE(p2pFirst % peers == 0 && after == p2pFirst + chunk,
                "comm 0 held %llu bytes for %llu peers, %llu after a message to itself", p2pFirst,
                peers, after);
  }
  if (me == 0) {
    printf(
        "many: %d communicators of %d ranks (%s): set up in %.3f s; this rank holds %.1f MiB "
        "(each: p2p-only %.2f MiB, with small collectives %.2f MiB, with small and large "
        "%.2f MiB)\n",
        count, n, eager ? "NCCL_RUNTIME_CONNECT=0" : "rings on first use", setup, total / 1048576.0,
        p2pOnly / 1048576.0, llOnly / 1048576.0, both / 1048576.0);
  }
  for (ncclComm_t c : comms) EXPECT_OK(ncclCommDestroy(c));
  EXPECT_OK(ncclCommDestroy(world));
}

// Every rank gets `want` from a registration where only `badRank` passes
// `badSize` (and the others `size`).
void expectRefused(ncclComm_t comm, int me, void* buf, size_t size, int flags, int badRank,
                   size_t badSize, const char* what) {
  ncclWindow_t w = reinterpret_cast<ncclWindow_t>(0x1);
  const ncclResult_t r =
      ncclCommWindowRegister(comm, buf, me == badRank ? badSize : size, &w, flags);
  EXPECT_TRUE(r == ncclInvalidArgument && w == nullptr, "%s: got %d (%s), window %p", what,
              static_cast<int>(r), ncclGetErrorString(r), static_cast<void*>(w));
}

void caseWindow(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  const uint64_t seed = agreedSeed(world, ctx);
  const size_t count = (size_t{5} << 20) / sizeof(float) + seed % 4096;  // > 4 MiB: SM-free
  const size_t bytes = count * sizeof(float);
  TestBuffer sendMem(bytes, BufferKind::Mapped),
      recvMem(bytes, BufferKind::Mapped);  // ncclMemAlloc
  void* sendBuf = sendMem.data();
  void* recvBuf = recvMem.data();
  ncclWindow_t sendWin = nullptr, recvWin = nullptr, extraWin = nullptr;
  EXPECT_OK(ncclCommWindowRegister(world, sendBuf, bytes, &sendWin, NCCL_WIN_COLL_SYMMETRIC));
  // Inside a group the handle is filled at ncclGroupEnd. Two registrations
  // of one communicator in one group (nccl-tests -R 2 does so) run in call
  // order on every rank: run together, one rank's first would pair with
  // another's second (different flags and sizes here: refused).
  TestBuffer extraMem(bytes / 2 + 4096, BufferKind::Mapped);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclCommWindowRegister(world, recvBuf, bytes, &recvWin, NCCL_WIN_DEFAULT));
  EXPECT_OK(ncclCommWindowRegister(world, extraMem.data(), extraMem.size(), &extraWin,
                                   NCCL_WIN_COLL_SYMMETRIC));
  EXPECT_TRUE(recvWin == nullptr, "a window registered inside a group exists before its end");
  EXPECT_OK(ncclGroupEnd());
  EXPECT_TRUE(sendWin != nullptr && recvWin != nullptr && extraWin != nullptr, "windows %p %p %p",
              static_cast<void*>(sendWin), static_cast<void*>(recvWin),
              static_cast<void*>(extraWin));
  if (extraWin != nullptr) EXPECT_OK(ncclCommWindowDeregister(world, extraWin));
  for (ncclWindow_t w : {sendWin, recvWin}) {
    int mapped = -1, mappable = -1;
    EXPECT_OK(ncclFerryWindowInfo(world, w, &mapped, &mappable));
    EXPECT_TRUE(mapped == n - 1 && mappable == 1,
                "window %p: %d peer windows mapped (expected %d), mappable %d",
                static_cast<void*>(w), mapped, n - 1, mappable);
  }
  const int next = (me + 1) % n;
  ncclFerryPeerStats_t before{}, after{};
  EXPECT_OK(ncclFerryCommPeerStats(world, next, &before));
  const int rounds = 3;
  for (int r = 0; r < rounds; ++r) {
    // SM-free: above FERRY_P2P_KERNEL_MAX_BYTES' 4 MiB default.
    exchange(world, me, next, (me + n - 1) % n, sendMem, recvMem, count,
             seed + 17 * static_cast<uint64_t>(r), "window message");
  }
  EXPECT_OK(ncclFerryCommPeerStats(world, next, &after));
  EXPECT_TRUE(after.sendZeroCopyOps - before.sendZeroCopyOps == rounds,
              "%llu of %d window sends were zero-copy",
              after.sendZeroCopyOps - before.sendZeroCopyOps, rounds);
  // Nothing went through a staging block (FERRY_P2P_STAGE_SENDS=0 on CUDA).
  EXPECT_TRUE(heldBy(world).staging == 0, "window messages grew %llu bytes of staging",
              heldBy(world).staging);

  // Memory peers cannot map (malloc; the CUDA pool) registers too (its
  // messages stage).
  TestBuffer plain(16384 + seed % 100 * 4, BufferKind::Plain);
  ncclWindow_t plainWin = nullptr;
  EXPECT_OK(ncclCommWindowRegister(world, plain.data(), plain.size(), &plainWin, NCCL_WIN_DEFAULT));
  int plainMapped = -1;
  EXPECT_OK(ncclFerryWindowInfo(world, plainWin, &plainMapped, nullptr));
  EXPECT_TRUE(plainMapped == 0, "peers mapped %d windows of plain memory", plainMapped);

  // One rank's bad arguments fail everyone's call; nothing is left behind.
  expectRefused(world, me, sendBuf, bytes, NCCL_WIN_DEFAULT, n - 1, 0, "size 0 on one rank");
  expectRefused(world, me, sendBuf, bytes, NCCL_WIN_COLL_SYMMETRIC, 0, bytes - 4096,
                "unequal symmetric sizes");
  expectRefused(world, me, sendBuf, bytes, 0x40, -1, 0, "unknown flags");
  EXPECT_RESULT(ncclCommWindowRegister(world, sendBuf, bytes, nullptr, 0), ncclInvalidArgument);
  checkAllReduce(world, n, 3001, seed + 99, "after refused registrations");

  EXPECT_OK(ncclCommWindowDeregister(world, sendWin));
  EXPECT_RESULT(ncclCommWindowDeregister(world, sendWin), ncclInvalidArgument);
  EXPECT_RESULT(ncclCommWindowDeregister(world, nullptr), ncclInvalidArgument);
  EXPECT_RESULT(ncclFerryWindowInfo(world, sendWin, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_OK(ncclCommWindowDeregister(world, plainWin));
  // recvWin stays registered: destroy lets it go.
  EXPECT_OK(ncclCommDestroy(world));
}

// Every element of `got` against valueOf(seed, who(i), i - first(i)),
// i.e. the shards of all-gather / broadcast laid out in `got`.
void checkShards(const std::vector<float>& got, size_t shard, int nshards, uint64_t seed,
                 const std::function<int(int)>& whoOfShard, const char* what) {
  int bad = 0;
  for (int k = 0; k < nshards; ++k) {
    for (size_t i = 0; i < shard; ++i) {
      const float want = valueOf(seed, whoOfShard(k), i);
      const float v = got[static_cast<size_t>(k) * shard + i];
      if (v != want && bad++ < 3) {
        EXPECT_TRUE(false, "%s: shard %d element %zu is %g, expected %g", what, k, i, v, want);
      }
    }
  }
}

unsigned long long ringCollectives(ncclComm_t comm) {
  unsigned long long ring = 0, hier = 0;
  EXPECT_OK(ncclFerryCommAlgoStats(comm, &ring, &hier));
  return ring;
}

// Large all-gathers and broadcasts into a symmetric window copy straight
// between the ranks' windows (comm/window_coll.h): results checked element
// by element (fresh data per round, outputs poisoned), in and out of place,
// every root; none of them runs on the ring, while the same collective
// below FERRY_WIN_COLL_MIN_BYTES (set by the test's environment), or into
// memory outside the window, does.
void caseWindowColl(const Ctx& ctx) {
  const int n = ctx.env.nranks, me = ctx.env.rank;
  ncclComm_t world = worldComm(ctx);
  const uint64_t seed = agreedSeed(world, ctx);
  const char* minEnv = getenv("FERRY_WIN_COLL_MIN_BYTES");
  const size_t minBytes = minEnv != nullptr ? strtoull(minEnv, nullptr, 10) : 0;
  EXPECT_TRUE(minBytes >= 4096, "set FERRY_WIN_COLL_MIN_BYTES (bytes) for this case");
  if (minBytes < 4096) {  // the shards below would be smaller than the case's own small gathers
    EXPECT_OK(ncclCommDestroy(world));
    return;
  }
  const size_t shard = minBytes / sizeof(float) + seed % 1024;  // floats per rank
  const size_t bytes = shard * sizeof(float);
  TestBuffer win(bytes * n, BufferKind::Mapped), send(bytes, BufferKind::Mapped);
  ncclWindow_t w = nullptr;
  EXPECT_OK(ncclCommWindowRegister(world, win.data(), bytes * n, &w, NCCL_WIN_COLL_SYMMETRIC));
  std::vector<float> host(shard * n);
  char* out = static_cast<char*>(win.data());
  const unsigned long long ringBefore = ringCollectives(world);
  for (int round = 0; round < 4; ++round) {
    const uint64_t rs = seed + 31 * static_cast<uint64_t>(round);
    const bool inPlace = round % 2 == 1;
    std::vector<float> mine(shard);
    for (size_t i = 0; i < shard; ++i) mine[i] = valueOf(rs, me, i);
    std::vector<float> poison(shard * n, -1e30f);
    win.upload(poison.data(), bytes * n);
    void* src = inPlace ? static_cast<void*>(out + bytes * me) : send.data();
    if (inPlace) {
      win.upload(mine.data(), bytes, bytes * me);
    } else {
      send.upload(mine.data(), bytes);
    }
    EXPECT_OK(ncclAllGather(src, win.data(), shard, ncclFloat, world, nullptr));
    EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
    win.download(host.data(), bytes * n);
    checkShards(
        host, shard, n, rs, [](int k) { return k; },
        inPlace ? "window all-gather in place" : "window all-gather");
  }
  for (int root = 0; root < n; ++root) {
    const uint64_t rs = seed + 1000 + static_cast<uint64_t>(root);
    const bool inPlace = root % 2 == 0;
    std::vector<float> data(shard), poison(shard, -1e30f);
    for (size_t i = 0; i < shard; ++i) data[i] = valueOf(rs, root, i);
    win.upload(poison.data(), bytes);
    if (me == root) (inPlace ? win : send).upload(data.data(), bytes);
    void* src = inPlace ? win.data() : send.data();
    EXPECT_OK(ncclBroadcast(src, win.data(), shard, ncclFloat, root, world, nullptr));
    EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
    std::vector<float> got(shard);
    win.download(got.data(), bytes);
    checkShards(
        got, shard, 1, rs, [root](int) { return root; }, "window broadcast");
  }
  // FERRY_WIN_COLL_OPS without allgather (the default): the 4 all-gathers
  // ran on the ring, the broadcasts still did not.
  const char* opsEnv = getenv("FERRY_WIN_COLL_OPS");
  const unsigned long long agOnRing =
      opsEnv != nullptr && strstr(opsEnv, "allgather") != nullptr ? 0 : 4;
  EXPECT_TRUE(ringCollectives(world) == ringBefore + agOnRing,
              "%llu window collectives ran on the ring, expected %llu",
              ringCollectives(world) - ringBefore, agOnRing);
  // Below the threshold, and outside any window: the ring.
  checkAllReduce(world, n, 777 + seed % 100, seed + 5, "all-reduce beside window collectives");
  const size_t small = 1000 + seed % 100;
  std::vector<float> mine(small), got(small * n);
  for (size_t i = 0; i < small; ++i) mine[i] = valueOf(seed + 7, me, i);
  send.upload(mine.data(), small * sizeof(float));
  EXPECT_OK(ncclAllGather(send.data(), win.data(), small, ncclFloat, world, nullptr));
  TestBuffer plain(bytes * n, BufferKind::Plain);
  EXPECT_OK(ncclAllGather(send.data(), plain.data(), small, ncclFloat, world, nullptr));
  EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
  win.download(got.data(), small * sizeof(float) * n);
  checkShards(
      got, small, n, seed + 7, [](int k) { return k; }, "small all-gather into a window");
  plain.download(got.data(), small * sizeof(float) * n);
  checkShards(
      got, small, n, seed + 7, [](int k) { return k; }, "all-gather outside windows");
  EXPECT_TRUE(ringCollectives(world) == ringBefore + agOnRing + 3,
              "%llu ring collectives, expected %llu", ringCollectives(world) - ringBefore,
              agOnRing + 3);
  EXPECT_OK(ncclCommWindowDeregister(world, w));
  EXPECT_OK(ncclCommDestroy(world));
}

// An invalid FERRY_WIN_COLL_OPS (set by the test) fails init on every rank
// with ncclInvalidArgument and a last error naming the knob.
void caseBadKnob(const Ctx& ctx) {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, ctx.env.nranks, id, ctx.env.rank);
  EXPECT_TRUE(r == ncclInvalidArgument, "init with a bad FERRY_WIN_COLL_OPS returned %d", r);
  const char* why = ncclGetLastError(nullptr);
  EXPECT_TRUE(why != nullptr && strstr(why, "FERRY_WIN_COLL_OPS") != nullptr,
              "last error does not name the knob: %s", why != nullptr ? why : "(null)");
  if (r == ncclSuccess) EXPECT_OK(ncclCommDestroy(comm));
}

}  // namespace

int main(int argc, char** argv) {
  return ferry::test::runCases(argc, argv,
                               {{"many", caseMany},
                                {"window", caseWindow},
                                {"wincoll", caseWindowColl},
                                {"badknob", caseBadKnob}});
}
