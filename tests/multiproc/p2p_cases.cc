// Multi-process tests of SM-free point-to-point through the public API, run
// under ferry-run on the host runtime (CI) and on CUDA (tests/gpu). Every
// payload is fresh random data that the receiver recomputes independently
// from the shared seed (sender, receiver, round), outputs are poisoned first,
// and every byte is compared.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/buffers.h"
#include "common/proc.h"
#include "common/random.h"
#include "core/params.h"
#include "ferry.h"
#include "mp_check.h"
#include "nccl.h"
#include "p2p_util.h"

namespace {

using namespace ferry::test;

// ---- alltoallv with random sizes, peers and buffer kinds ------------------

// Bytes rank s sends to rank r in `round` (both sides compute it).
size_t pairBytes(const World& w, uint64_t round, int s, int r, size_t maxBytes) {
  Rng rng(w.seed ^ (round * 0x9E3779B97F4A7C15ULL), static_cast<uint64_t>(s * 4096 + r) + 1);
  uint64_t pick = rng.below(8);
  if (pick == 0) return 0;
  if (pick == 1) return 1 + rng.below(7);  // odd tiny sizes
  return rng.below(maxBytes + 1);
}

void roundOfAlltoallv(World& w, uint64_t round, size_t maxBytes, BufferKind sendKind,
                      BufferKind recvKind) {
  const int n = w.nranks, me = w.rank;
  std::vector<std::unique_ptr<Message>> outgoing, incoming;
  for (int p = 0; p < n; ++p) {
    outgoing.push_back(
        std::make_unique<Message>(w, round, me, p, pairBytes(w, round, me, p, maxBytes), sendKind));
    incoming.push_back(
        std::make_unique<Message>(w, round, p, me, pairBytes(w, round, p, me, maxBytes), recvKind));
    outgoing.back()->fillAsSender();
    incoming.back()->poison();
  }
  // Random peer order, sends and receives interleaved, all in one group.
  std::vector<int> order(2 * n);
  for (int i = 0; i < 2 * n; ++i) order[i] = i;
  Rng shuffle(w.seed ^ round, 777 + me);
  for (int i = 2 * n - 1; i > 0; --i) std::swap(order[i], order[shuffle.below(i + 1)]);
  EXPECT_OK(ncclGroupStart());
  for (int k : order) {
    int p = k % n;
    if (k < n) {
      EXPECT_OK(
          ncclSend(outgoing[p]->buf.data(), outgoing[p]->bytes, ncclInt8, p, w.comm, w.stream));
    } else {
      EXPECT_OK(
          ncclRecv(incoming[p]->buf.data(), incoming[p]->bytes, ncclInt8, p, w.comm, w.stream));
    }
  }
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  for (int p = 0; p < n; ++p) incoming[p]->verify("alltoallv");
}

// FERRY_TEST_EXPECT_KERNEL (across emulated hosts): 1, every message went
// through kernel p2p, so the communicator holds its lanes' memory and no
// SM-free staging (which every SM-free message to another host grows); 0,
// the other way round.
void checkPath(World& w) {
  const char* expect = getenv("FERRY_TEST_EXPECT_KERNEL");
  if (expect == nullptr) return;
  unsigned long long held = 0, fifos = 0, staging = 0;
  EXPECT_OK(ncclFerryCommMemory(w.comm, &held, &fifos, &staging));
  printf("rank %d: holds %llu bytes of connections, %llu of SM-free staging\n", w.rank, held,
         staging);
  if (atoi(expect) != 0) {
    EXPECT_TRUE(held > 0 && staging == 0, "kernel p2p expected: held %llu, staging %llu", held,
                staging);
  } else {
    EXPECT_TRUE(staging > 0, "SM-free across hosts expected: staging %llu", staging);
  }
}

void caseAlltoall(World& w) {
  const BufferKind kinds[2] = {BufferKind::Plain, BufferKind::Mapped};
  const uint64_t rounds = static_cast<uint64_t>(testRounds(24));  // 4 buffer-kind pairs each
  for (uint64_t round = 0; round < rounds; ++round) {
    roundOfAlltoallv(w, round, 3 << 20, kinds[round % 2], kinds[(round / 2) % 2]);
  }
  // ncclAlltoAll itself: equal blocks, float, one call.
  const size_t count = 12345;
  const size_t block = count * sizeof(float);
  TestBuffer send(block * w.nranks, BufferKind::Plain), recv(block * w.nranks, BufferKind::Mapped);
  std::vector<uint8_t> host(block * w.nranks);
  for (int p = 0; p < w.nranks; ++p)
    expectedPayload(w, 99, w.rank, p, host.data() + block * p, block);
  send.upload(host.data(), host.size());
  std::vector<uint8_t> poison(host.size(), 0xA5);
  recv.upload(poison.data(), poison.size());
  EXPECT_OK(ncclAlltoAll(send.data(), recv.data(), count, ncclFloat, w.comm, w.stream));
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  recv.download(host.data(), host.size());
  std::vector<uint8_t> want(block);
  for (int p = 0; p < w.nranks; ++p) {
    expectedPayload(w, 99, p, w.rank, want.data(), block);
    const uint8_t* got = host.data() + block * p;
    size_t bad = 0, firstBad = block;
    for (size_t k = 0; k < block; ++k) {
      if (got[k] != want[k]) {
        ++bad;
        if (firstBad == block) firstBad = k;
      }
    }
    EXPECT_TRUE(bad == 0,
                "ncclAlltoAll block from %d: %zu of %zu bytes differ, first at %zu (0x%02x)", p,
                bad, block, firstBad, firstBad < block ? got[firstBad] : 0);
  }
  checkPath(w);
}

// 1,000 small rounds (FERRY_TEST_ROUNDS): random sizes (0..64 KiB), random
// subsets of peers.
void caseStress(World& w) {
  const uint64_t rounds = static_cast<uint64_t>(testRounds(1000));
  for (uint64_t round = 0; round < rounds; ++round) {
    roundOfAlltoallv(w, 1000 + round, 64 << 10, BufferKind::Plain,
                     round % 3 == 0 ? BufferKind::Mapped : BufferKind::Plain);
  }
}

// Every datatype, counts 0, 1 and a prime, to every peer and to self; then
// gather and scatter with every root.
void caseDtypes(World& w) {
  const size_t counts[3] = {0, 1, 1009};
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto type = static_cast<ncclDataType_t>(t);
    for (size_t count : counts) {
      size_t bytes = count * dataTypeSize(type);
      uint64_t round = 5000 + t * 8 + count % 7;
      std::vector<std::unique_ptr<Message>> out, in;
      EXPECT_OK(ncclGroupStart());
      for (int p = 0; p < w.nranks; ++p) {
        out.push_back(std::make_unique<Message>(w, round, w.rank, p, bytes, BufferKind::Plain));
        in.push_back(std::make_unique<Message>(w, round, p, w.rank, bytes, BufferKind::Plain));
        out.back()->fillAsSender();
        in.back()->poison();
        EXPECT_OK(ncclSend(out.back()->buf.data(), count, type, p, w.comm, w.stream));
        EXPECT_OK(ncclRecv(in.back()->buf.data(), count, type, p, w.comm, w.stream));
      }
      EXPECT_OK(ncclGroupEnd());
      EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
      for (auto& m : in) m->verify(dataTypeName(type));
    }
  }
  for (int root = 0; root < w.nranks; ++root) gatherScatter(w, root);
}

// Many messages per peer in one group (in-order matching per peer): the
// count per round is random, so kernel p2p takes its small argument table in
// some rounds (<= 32 tasks, <= 32 blocks) and the large one in others.
void caseMany(World& w) {
  const int n = w.nranks;
  for (uint64_t round = 0; round < 40; ++round) {
    Rng pick(w.seed ^ (round * 0xA24BAED4963EE407ULL), 4242);
    const int k = 1 + static_cast<int>(pick.below(24));
    std::vector<std::unique_ptr<Message>> out, in;
    EXPECT_OK(ncclGroupStart());
    for (int j = 0; j < k; ++j) {
      const uint64_t id = 9000 + round * 64 + static_cast<uint64_t>(j);
      for (int p = 0; p < n; ++p) {
        out.push_back(std::make_unique<Message>(w, id, w.rank, p, pairBytes(w, id, w.rank, p, 4096),
                                                BufferKind::Plain));
        in.push_back(std::make_unique<Message>(w, id, p, w.rank, pairBytes(w, id, p, w.rank, 4096),
                                               BufferKind::Plain));
        out.back()->fillAsSender();
        in.back()->poison();
        EXPECT_OK(
            ncclSend(out.back()->buf.data(), out.back()->bytes, ncclInt8, p, w.comm, w.stream));
        EXPECT_OK(ncclRecv(in.back()->buf.data(), in.back()->bytes, ncclInt8, p, w.comm, w.stream));
      }
    }
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    for (auto& m : in) m->verify("many");
  }
}

// Kernel p2p's timeout (NCCL_PASS_SM=0, FERRY_P2P_TIMEOUT=2): even ranks
// send a message larger than the peer FIFO (so it cannot complete early)
// that their odd peer never receives; the send's stream must fail in about
// that time (as a collective's does), not hang. Then all abort.
void caseKernelTimeout(World& w) {
  if (w.nranks % 2 != 0) return;
  const size_t bytes = 8 << 20;
  Message out(w, 9200, w.rank, w.rank ^ 1, bytes, BufferKind::Plain);
  out.fillAsSender();
  if (w.rank % 2 == 0) {
    auto start = Clock::now();
    EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclInt8, w.rank ^ 1, w.comm, w.stream));
    const ncclResult_t synced = ncclFerryStreamSynchronize(w.stream);
    const double s = secondsSince(start);
    printf("unmatched kernel-p2p send: stream %s after %.2f s\n", ncclGetErrorString(synced), s);
    EXPECT_TRUE(synced != ncclSuccess, "a send whose receiver never came completed");
    EXPECT_TRUE(s > 1.5 && s < 60.0, "failed after %.2f s with FERRY_P2P_TIMEOUT=2", s);
  }
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));  // the odd ranks wait here
  EXPECT_OK(ncclCommAbort(w.comm));
  w.comm = nullptr;
}

// ---- unbatched orders that kernel-mode NCCL completes ----------------------

// (a) rank 0: send on comm A / stream A, then recv on comm B / stream B;
//     rank 1: send on B / stream B, then recv on A / stream A; each call its
//     own group. Messages exceed the FIFO, so a send cannot finish early.
// Both ranks receive first, then send, as separate calls on two streams
// (legal with NCCL: the streams are independent). Each receive is large
// enough that its stream work is long (many chunks across hosts); neither
// call may block its caller until the peer's data arrives, or both ranks
// would wait for sends that are never issued.
void caseRecvFirst(World& w) {
  if (w.nranks % 2 != 0) return;
  const int peer = w.rank ^ 1;
  const size_t bytes = onCuda() ? (size_t{4} << 30) + 333 : (size_t{96} << 20) + 333;
  Message out(w, 14, w.rank, peer, bytes, BufferKind::Plain);
  Message in(w, 14, peer, w.rank, bytes, BufferKind::Plain);
  out.fillAsSender();
  in.poison();
  cudaStream_t other = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&other));
  auto start = Clock::now();
  EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
  printf("receive call returned after %.3f s\n", secondsSince(start));
  EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclInt8, peer, w.comm, other));
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  EXPECT_OK(ncclFerryStreamSynchronize(other));
  printf("receive-first exchange of %zu bytes in %.3f s\n", bytes, secondsSince(start));
  in.verify("receive first");
  EXPECT_OK(ncclFerryStreamDestroy(other));
}

void caseUnbatched(World& w) {
  if (w.nranks % 2 != 0) return;
  const int peer = w.rank ^ 1;
  const bool first = (w.rank % 2) == 0;
  const size_t bytes = 24 << 20;
  World b = w.split();  // communicator B over the same ranks
  cudaStream_t streamB = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&streamB));
  for (BufferKind kind : {BufferKind::Plain, BufferKind::Mapped}) {
    Message outA(w, 11, w.rank, peer, bytes, kind), inA(w, 11, peer, w.rank, bytes, kind);
    Message outB(w, 12, w.rank, peer, bytes, kind), inB(w, 12, peer, w.rank, bytes, kind);
    outA.fillAsSender();
    outB.fillAsSender();
    inA.poison();
    inB.poison();
    if (first) {
      EXPECT_OK(ncclSend(outA.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
      EXPECT_OK(ncclRecv(inB.buf.data(), bytes, ncclInt8, peer, b.comm, streamB));
    } else {
      EXPECT_OK(ncclSend(outB.buf.data(), bytes, ncclInt8, peer, b.comm, streamB));
      EXPECT_OK(ncclRecv(inA.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
    }
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(streamB));
    if (first) {
      inB.verify("unbatched (a)");
    } else {
      inA.verify("unbatched (a)");
    }
    // (b) pipeline order on one stream: even ranks send then receive, odd
    // ranks receive then send, no group around the pair.
    Message out(w, 13, w.rank, peer, bytes, kind), in(w, 13, peer, w.rank, bytes, kind);
    out.fillAsSender();
    in.poison();
    if (first) {
      EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
      EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
    } else {
      EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
      EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
    }
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    in.verify("pipeline (b)");
  }
  EXPECT_OK(ncclFerryStreamDestroy(streamB));
  b.destroy();
}

// Whether sends are staged when their receiver is not ready: forced by
// FERRY_P2P_STAGE_SENDS=1, or CUDA's default under lazy module loading.
bool stagedSends() {
  const char* stage = getenv("FERRY_P2P_STAGE_SENDS");
  const char* loading = getenv("CUDA_MODULE_LOADING");
  const bool eager = loading != nullptr && strcmp(loading, "EAGER") == 0;
  return (stage != nullptr && strcmp(stage, "1") == 0) ||
         (onCuda() && !eager && (stage == nullptr || strcmp(stage, "0") != 0));
}

// Also staged when first: on a communicator spanning hosts, same-host sends
// of up to FERRY_P2P_KERNEL_MAX_BYTES (4M by default; what one host's kernel
// p2p would buffer), unless FERRY_P2P_STAGE_SENDS=0.
bool stagedSends(const World& w, size_t bytes) {
  if (stagedSends()) return true;
  const char* stage = getenv("FERRY_P2P_STAGE_SENDS");
  const int perHost = ranksPerTestHost();
  if ((stage != nullptr && strcmp(stage, "0") == 0) || perHost == 0 || perHost >= w.nranks) {
    return false;
  }
  const char* k = getenv("FERRY_P2P_KERNEL_MAX_BYTES");
  int64_t max = int64_t{4} << 20;
  // An unparsable value means the default, as in the library.
  if (k != nullptr && !ferry::parseParamInt(k, &max)) max = int64_t{4} << 20;
  return static_cast<int64_t>(bytes) <= max;
}

// Registered/unregistered on both sides, and a registration never changes
// results. The side that arrives second copies straight from or into the
// first side's buffer when it can map it, else through the first side's
// staging block: one copy (counted "direct" by the sender) when both
// buffers are mappable, two when neither is; either in between, by arrival
// order. A staged send (lazy loading) is direct only when its receiver was
// there first.
void caseMixes(World& w) {
  if (w.nranks < 2) return;
  const int next = (w.rank + 1) % w.nranks, prev = (w.rank + w.nranks - 1) % w.nranks;
  const size_t bytes = (5 << 20) + 3;
  int round = 20;
  const char* passSm = getenv("NCCL_PASS_SM");
  const bool kernelP2p = passSm != nullptr && strcmp(passSm, "0") == 0;
  const bool staged = stagedSends();
  const char* zc = getenv("FERRY_P2P_ZERO_COPY");
  const bool noDirect = zc != nullptr && strcmp(zc, "0") == 0;
  const char* p2pOff = getenv("NCCL_P2P_DISABLE");
  const bool shm = p2pOff != nullptr && strcmp(p2pOff, "1") == 0;
  // Emulated hosts (FERRY_TEST_RANKS_PER_HOST): the network path always
  // stages, so a send to another host is never direct.
  const bool net = onOtherHost(w.rank, next);
  for (BufferKind sk : {BufferKind::Plain, BufferKind::Mapped}) {
    for (BufferKind rk : {BufferKind::Plain, BufferKind::Mapped}) {
      ++round;
      Message out(w, round, w.rank, next, bytes, sk), in(w, round, prev, w.rank, bytes, rk);
      out.fillAsSender();
      in.poison();
      void* reg = nullptr;
      EXPECT_OK(ncclCommRegister(w.comm, in.buf.data(), bytes, &reg));
      ncclFerryPeerStats_t before{}, after{};
      EXPECT_OK(ncclFerryCommPeerStats(w.comm, next, &before));
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclUint8, next, w.comm, w.stream));
      EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclUint8, prev, w.comm, w.stream));
      EXPECT_OK(ncclGroupEnd());
      EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
      in.verify("mixes");
      EXPECT_OK(ncclCommDeregister(w.comm, reg));
      // The receiver's buffer kind, as its sender (this rank) needs it.
      std::vector<int> kinds(w.nranks, 0);
      kinds[w.rank] = rk == BufferKind::Mapped ? 1 : 0;
      EXPECT_OK(ncclFerryBootstrapAllGather(w.comm, kinds.data(), sizeof(int)));
      EXPECT_OK(ncclFerryCommPeerStats(w.comm, next, &after));
      unsigned long long direct = after.sendZeroCopyOps - before.sendZeroCopyOps;
      const bool mine = sk == BufferKind::Mapped, theirs = kinds[next] != 0;
      if (kernelP2p || noDirect || shm || net || (!mine && !theirs)) {
        EXPECT_TRUE(direct == 0, "send to %d (kinds %d/%d): %llu direct copies, expected none",
                    next, mine, theirs, direct);
      } else if (mine && theirs && !staged) {
        EXPECT_TRUE(direct == 1, "send to %d (both mappable): %llu direct copies, expected one",
                    next, direct);
      } else {
        EXPECT_TRUE(direct <= 1, "send to %d: %llu direct copies", next, direct);
      }
      EXPECT_TRUE(after.sendBytes - before.sendBytes == bytes, "byte counter");
    }
  }
}

// Whether a staged-send case can run (pairs of ranks, staging forced);
// prints why not otherwise.
// Staged sends only (FERRY_P2P_STAGE_SENDS=1): one group sends a buffer to
// the peer and receives the peer's bytes into the SAME buffer, zero-copy.
// The send is staged from the buffer, so the receive may let the peer write
// into it only after the staging copies have read it; each side must end up
// with exactly the other's original bytes. (Without staging the NCCL API
// leaves this undefined, so the case is skipped there.)
void caseSwap(World& w) {
  if (!stagedPairsOrSkip(w, "swap")) return;
  const int peer = w.rank ^ 1;
  for (int round = 0; round < 64; ++round) {
    const size_t bytes = (size_t{3} << 20) + 4099 * static_cast<size_t>(round);
    Message in(w, 700 + round, peer, w.rank, bytes, BufferKind::Mapped);
    std::vector<uint8_t> mine(bytes);
    expectedPayload(w, 700 + round, w.rank, peer, mine.data(), bytes);
    in.buf.upload(mine.data(), bytes);
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(in.buf.data(), bytes, ncclUint8, peer, w.comm, w.stream));
    EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclUint8, peer, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    in.verify("swap");
  }
}

// A staged send's buffer is the user's again as soon as the send is
// enqueued: here the very next work on its stream (a self copy) overwrites
// it, and the peer must still receive what it held at the send. Catches a
// staging copy that the user's stream does not wait for.
void caseOverwrite(World& w) {
  if (!stagedPairsOrSkip(w, "overwrite")) return;
  const int peer = w.rank ^ 1;
  constexpr size_t kBusyBytes = size_t{16} << 20;
  for (int round = 0; round < 12; ++round) {
    const size_t bytes = (size_t{8} << 20) + 8191 * static_cast<size_t>(round);
    const uint64_t r = 900 + static_cast<uint64_t>(round) * 4;
    Message out(w, r, w.rank, peer, bytes, BufferKind::Plain);
    Message later(w, r + 1, w.rank, w.rank, bytes, BufferKind::Plain);
    Message in(w, r, peer, w.rank, bytes, BufferKind::Plain);
    out.fillAsSender();
    later.fillAsSender();
    in.poison();
    // Keeps the stream busy first (a 16 MiB self copy), so the overwrite is
    // ready to run the moment the send's turn comes, before any staging copy
    // running elsewhere would have read the buffer.
    Message busyFrom(w, r + 2, w.rank, w.rank, kBusyBytes, BufferKind::Plain);
    Message busyTo(w, r + 2, w.rank, w.rank, kBusyBytes, BufferKind::Plain);
    busyFrom.fillAsSender();
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(busyFrom.buf.data(), kBusyBytes, ncclUint8, w.rank, w.comm, w.stream));
    EXPECT_OK(ncclRecv(busyTo.buf.data(), kBusyBytes, ncclUint8, w.rank, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclUint8, peer, w.comm, w.stream));
    // Overwrites `out` on the same stream: a self pair is one stream copy.
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(later.buf.data(), bytes, ncclUint8, w.rank, w.comm, w.stream));
    EXPECT_OK(ncclRecv(out.buf.data(), bytes, ncclUint8, w.rank, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclUint8, peer, w.comm, w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    in.verify("overwrite: received");
    busyTo.verify("overwrite: self copy");
    std::vector<uint8_t> got(bytes), want(bytes);
    out.buf.download(got.data(), bytes);
    later.buf.download(want.data(), bytes);
    EXPECT_TRUE(got == want, "overwrite: the send buffer does not hold the self copy");
  }
}

// Sends to self and receives from self (SM-free: run with
// FERRY_P2P_KERNEL_MAX_BYTES=0). A group whose self operations pair up one
// to one is copied directly (FERRY_P2P_SELF_COPY, default on; 2: after the
// group's other messages; 3: in pieces between a peer copy's), which the
// self connection's direct-copy counter shows by not moving; every other
// arrangement goes through the self connection and must keep in-order
// matching across groups.
uint64_t selfZeroCopyOps(World& w) {
  ncclFerryPeerStats_t st{};
  EXPECT_OK(ncclFerryCommPeerStats(w.comm, w.rank, &st));
  return st.sendZeroCopyOps;
}

void caseSelf(World& w) {
  const char* knob = getenv("FERRY_P2P_SELF_COPY");
  const bool selfCopy = knob == nullptr || strcmp(knob, "0") != 0;
  const int me = w.rank, next = (w.rank + 1) % w.nranks, prev = (w.rank + w.nranks - 1) % w.nranks;
  cudaStream_t other = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&other));
  for (int iter = 0; iter < 8; ++iter) {
    const size_t a = (size_t{257} << 10) + 13 * static_cast<size_t>(iter), b = a + 4097;
    const bool staged = stagedSends(w, a);
    const uint64_t r = 800 + static_cast<uint64_t>(iter) * 8;
    // 1. Pairs on two streams beside peer traffic, plus an in-place pair.
    Message s1(w, r, me, me, a, BufferKind::Plain), d1(w, r, me, me, a, BufferKind::Plain);
    Message s2(w, r + 1, me, me, b, BufferKind::Plain), d2(w, r + 1, me, me, b, BufferKind::Plain);
    Message inPlace(w, r + 2, me, me, a, BufferKind::Plain);
    Message out(w, r + 3, me, next, b, BufferKind::Plain),
        in(w, r + 3, prev, me, b, BufferKind::Plain);
    // Two zero-copy receives from one peer on two streams: their recvReady
    // writes must land in order (the second on the other stream).
    Message outZ(w, r + 6, me, next, a, BufferKind::Mapped),
        inZ(w, r + 6, prev, me, a, BufferKind::Mapped);
    Message outZ2(w, r + 7, me, next, a, BufferKind::Mapped),
        inZ2(w, r + 7, prev, me, a, BufferKind::Mapped);
    for (Message* m : {&s1, &s2, &inPlace, &out, &outZ, &outZ2}) m->fillAsSender();
    for (Message* m : {&d1, &d2, &in, &inZ, &inZ2}) m->poison();
    uint64_t zc = selfZeroCopyOps(w);
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(s1.buf.data(), a, ncclInt8, me, w.comm, w.stream));
    EXPECT_OK(ncclRecv(d1.buf.data(), a, ncclInt8, me, w.comm, other));
    EXPECT_OK(ncclSend(out.buf.data(), b, ncclInt8, next, w.comm, w.stream));
    EXPECT_OK(ncclSend(s2.buf.data(), b, ncclInt8, me, w.comm, other));
    EXPECT_OK(ncclRecv(in.buf.data(), b, ncclInt8, prev, w.comm, w.stream));
    EXPECT_OK(ncclRecv(d2.buf.data(), b, ncclInt8, me, w.comm, w.stream));
    EXPECT_OK(ncclSend(inPlace.buf.data(), a, ncclInt8, me, w.comm, w.stream));
    EXPECT_OK(ncclRecv(inPlace.buf.data(), a, ncclInt8, me, w.comm, w.stream));
    EXPECT_OK(ncclSend(outZ.buf.data(), a, ncclInt8, next, w.comm, w.stream));
    EXPECT_OK(ncclSend(outZ2.buf.data(), a, ncclInt8, next, w.comm, w.stream));
    EXPECT_OK(ncclRecv(inZ.buf.data(), a, ncclInt8, prev, w.comm, w.stream));
    EXPECT_OK(ncclRecv(inZ2.buf.data(), a, ncclInt8, prev, w.comm, other));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(other));
    for (Message* m : {&d1, &d2, &inPlace, &in, &inZ, &inZ2}) m->verify("self pairs");
    // Through the self connection, the in-place pair's send stages (its
    // receive overwrites its bytes): 2 direct sends, not 3.
    uint64_t proxied = selfZeroCopyOps(w) - zc;
    EXPECT_TRUE(proxied == (selfCopy || staged ? 0u : 2u),
                "paired self sends: %llu through the self connection",
                static_cast<unsigned long long>(proxied));
    // 2. Split over groups: the receive of the second group must get the
    // first group's send (in order), so no group may be copied directly.
    // x and gy sit on the other stream: an unstaged send holds its stream
    // until received (as a send kernel would), so one stream would deadlock.
    Message x(w, r + 4, me, me, a, BufferKind::Plain), y(w, r + 5, me, me, a, BufferKind::Plain);
    Message gx(w, r + 4, me, me, a, BufferKind::Plain), gy(w, r + 5, me, me, a, BufferKind::Plain);
    x.fillAsSender();
    y.fillAsSender();
    gx.poison();
    gy.poison();
    zc = selfZeroCopyOps(w);
    EXPECT_OK(ncclSend(x.buf.data(), a, ncclInt8, me, w.comm, other));
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(y.buf.data(), a, ncclInt8, me, w.comm, w.stream));
    EXPECT_OK(ncclRecv(gx.buf.data(), a, ncclInt8, me, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclRecv(gy.buf.data(), a, ncclInt8, me, w.comm, other));
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(other));
    gx.verify("self across groups (first)");
    gy.verify("self across groups (second)");
    // Through the self connection (a staged send is not a direct copy).
    proxied = selfZeroCopyOps(w) - zc;
    EXPECT_TRUE(proxied == (staged ? 0u : 2u), "self sends across groups: %llu direct copies",
                static_cast<unsigned long long>(proxied));
  }
  EXPECT_OK(ncclFerryStreamDestroy(other));
}

// GPipe's pattern (a pipeline's forward pass): the even rank of each pair
// sends K activations back to back, each its own call, without waiting; the
// odd rank receives them one at a time, "computing" (a host pause of
// FERRY_TEST_PAUSE_MS, default 20) between receives. Every message checked.
// The printed times say whether the sends moved while the receiver computed
// (~K x max(transfer, pause)) or only once it asked (~K x (transfer +
// pause)): across emulated hosts, the network path's eagerness (NOTES Open 0).
void casePipeline(World& w) {
  if (w.nranks % 2 != 0) return;
  const int peer = w.rank ^ 1;
  const bool sender = w.rank % 2 == 0;
  // FERRY_TEST_PIPE_MSGS / FERRY_TEST_PIPE_MIB: a longer run of smaller
  // activations (the push-wait retry tests count waits over many messages).
  const char* msgsEnv = getenv("FERRY_TEST_PIPE_MSGS");
  const char* mibEnv = getenv("FERRY_TEST_PIPE_MIB");
  const int k = msgsEnv != nullptr ? std::max(1, atoi(msgsEnv)) : 8;
  const size_t mib = mibEnv != nullptr ? static_cast<size_t>(std::max(1, atoi(mibEnv))) : 16;
  const size_t bytes = (mib << 20) + 4096 * (w.seed % 7);
  const char* pauseEnv = getenv("FERRY_TEST_PAUSE_MS");
  const double pauseS = (pauseEnv != nullptr ? atof(pauseEnv) : 20.0) / 1000.0;
  std::vector<std::unique_ptr<Message>> msgs;
  for (int i = 0; i < k; ++i) {
    const int from = sender ? w.rank : peer, to = sender ? peer : w.rank;
    msgs.push_back(std::make_unique<Message>(w, 40 + i, from, to, bytes, BufferKind::Plain));
    if (sender) {
      msgs.back()->fillAsSender();
    } else {
      msgs.back()->poison();
    }
  }
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  auto start = Clock::now();
  double pauses = 0;
  for (int i = 0; i < k; ++i) {
    Message& m = *msgs[i];
    if (sender) {
      EXPECT_OK(ncclSend(m.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
      continue;
    }
    EXPECT_OK(ncclRecv(m.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    auto p = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(pauseS));
    pauses += secondsSince(p);
  }
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  const double total = secondsSince(start);
  if (!sender) {
    printf(
        "pipeline: %d x %zu bytes, %.0f ms pause after each receive: %.3f s, of it %.3f s "
        "waiting for data\n",
        k, bytes, pauseS * 1000, total, total - pauses);
    for (int i = 0; i < k; ++i) msgs[i]->verify("pipeline");
  }
}

// Kernel p2p connects on first use per peer, without the peer's thread:
// the sender's message (small enough for the FIFO) completes while the
// receiver is still waiting in a bootstrap barrier that the sender reaches
// only after its stream is done. If making the connection needed the
// receiver's thread, both would wait for each other until the test's
// timeout. Then the other way round, and every byte is checked.
void caseFirstUse(World& w) {
  if (w.nranks % 2 != 0) return;
  const int peer = w.rank ^ 1;
  const size_t bytes = 1000 + w.seed % 24;
  for (int dir = 0; dir < 2; ++dir) {
    const bool sender = (w.rank % 2) == dir;
    const int from = sender ? w.rank : peer, to = sender ? peer : w.rank;
    Message m(w, 60 + dir, from, to, bytes, BufferKind::Plain);
    if (sender) {
      m.fillAsSender();
      EXPECT_OK(ncclSend(m.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
      EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
      EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
    } else {
      m.poison();
      EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
      EXPECT_OK(ncclRecv(m.buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
      EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
      m.verify("first use");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<void(World&)>> cases = {
      {"alltoall", caseAlltoall},
      {"stress", caseStress},
      {"dtypes", caseDtypes},
      {"unbatched", caseUnbatched},
      {"recvfirst", caseRecvFirst},
      {"mixes", caseMixes},
      {"large", caseLarge},
      {"abort", caseAbortInFlight},
      {"timeout", caseTimeout},
      {"swap", caseSwap},
      {"inplace", caseInPlace},
      {"inplacemix", caseInPlaceMixed},
      {"many", caseMany},
      {"ktimeout", caseKernelTimeout},
      {"self", caseSelf},
      {"overwrite", caseOverwrite},
      {"pipeline", casePipeline},
      {"firstuse", caseFirstUse},
      {"recvdepth", caseRecvDepth},
      {"senddepth", caseSendDepth},
      {"senddepthbusy", caseSendDepthBusy},
      {"sharedstaging", caseSharedStaging},
      {"lateexchange", caseLateExchange},
      {"latemany", caseLateMany},
      {"stagingcap", caseStagingCap},
      {"chain", caseChain},
      {"newstreams", caseNewStreams},
  };
  return runCase(argc, argv, cases);
}
