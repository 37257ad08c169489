#include "p2p_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "common/proc.h"
#include "common/random.h"
#include "ferry.h"
#include "mp_check.h"

namespace ferry::test {

World World::split() const {
  World s = *this;
  s.comm = nullptr;
  EXPECT_OK(ncclCommSplit(comm, 0, rank, &s.comm, nullptr));
  return s;
}

void World::destroy() {
  if (comm != nullptr) EXPECT_OK(ncclCommDestroy(comm));
  comm = nullptr;
}

namespace {

Rng payloadRng(const World& w, uint64_t round, int sender, int receiver) {
  return Rng(w.seed ^ (round * 0x9E3779B97F4A7C15ULL),
             static_cast<uint64_t>(sender) * 65536 + receiver);
}

// The next `bytes` of a payload stream: 8 bytes per draw, the tail (only
// in a payload's last piece) from one more. Pieces of whole 8-byte
// multiples followed by the rest give the bytes of a single call.
void nextPayload(Rng& rng, uint8_t* p, size_t bytes) {
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t v = rng.next();
    memcpy(p + i, &v, 8);
  }
  if (i == bytes) return;
  uint64_t v = rng.next();
  for (; i < bytes; ++i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}

// Large messages are filled and checked a piece at a time (a multiple of
// 8 bytes): no host copy of a whole 2 GiB message (page faults dominate
// the host runtime's large-message test).
constexpr size_t kPieceBytes = size_t{64} << 20;

}  // namespace

void expectedPayload(const World& w, uint64_t round, int sender, int receiver, void* out,
                     size_t bytes) {
  Rng rng = payloadRng(w, round, sender, receiver);
  nextPayload(rng, static_cast<uint8_t*>(out), bytes);
}

Message::Message(const World& w, uint64_t r, int s, int d, size_t b, BufferKind kind)
    : world(w), round(r), sender(s), receiver(d), bytes(b), buf(b, kind) {
  EXPECT_TRUE(buf.ok(), "allocation of %zu bytes failed", b);
}

void Message::fillAsSender() {
  Rng rng = payloadRng(world, round, sender, receiver);
  std::vector<uint8_t> host(std::min(bytes, kPieceBytes));
  for (size_t off = 0; off < bytes; off += kPieceBytes) {
    const size_t n = std::min(kPieceBytes, bytes - off);
    nextPayload(rng, host.data(), n);
    buf.upload(host.data(), n, off);
  }
}

void Message::poison() {
  std::vector<uint8_t> host(std::min(bytes, kPieceBytes), 0xA5);
  for (size_t off = 0; off < bytes; off += kPieceBytes) {
    buf.upload(host.data(), std::min(kPieceBytes, bytes - off), off);
  }
}

void Message::verify(const char* what) {
  Rng rng = payloadRng(world, round, sender, receiver);
  const size_t piece = std::min(bytes, kPieceBytes);
  std::vector<uint8_t> got(piece), want(piece);
  for (size_t off = 0; off < bytes; off += kPieceBytes) {
    const size_t n = std::min(kPieceBytes, bytes - off);
    buf.download(got.data(), n, off);
    nextPayload(rng, want.data(), n);
    if (memcmp(got.data(), want.data(), n) == 0) continue;
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    EXPECT_TRUE(false, "%s: round %llu %d->%d (%zu bytes): byte %zu is 0x%02x, expected 0x%02x",
                what, static_cast<unsigned long long>(round), sender, receiver, bytes, off + i,
                got[i], want[i]);
    return;
  }
}

// Gather to `root`, then scatter from it, in double (8-byte elements).
void gatherScatter(World& w, int root) {
  const size_t count = 777;
  const size_t block = count * sizeof(double);
  const int n = w.nranks;
  Message mine(w, 6000 + root, w.rank, root, block, BufferKind::Plain);
  mine.fillAsSender();
  TestBuffer all(block * n, BufferKind::Mapped);
  std::vector<uint8_t> host(block * n, 0xA5);
  all.upload(host.data(), host.size());
  EXPECT_OK(ncclGather(mine.buf.data(), all.data(), count, ncclFloat64, root, w.comm, w.stream));
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  std::vector<uint8_t> want(block);
  if (w.rank == root) {
    all.download(host.data(), host.size());
    for (int p = 0; p < n; ++p) {
      expectedPayload(w, 6000 + root, p, root, want.data(), block);
      EXPECT_TRUE(memcmp(host.data() + block * p, want.data(), block) == 0, "gather block %d", p);
    }
    for (int p = 0; p < n; ++p)
      expectedPayload(w, 7000 + root, root, p, host.data() + block * p, block);
    all.upload(host.data(), host.size());
  }
  Message in(w, 7000 + root, root, w.rank, block, BufferKind::Plain);
  in.poison();
  EXPECT_OK(ncclScatter(all.data(), in.buf.data(), count, ncclFloat64, root, w.comm, w.stream));
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  in.verify("scatter");
}

// A message of more than 2^31 elements (host runtime) or more than 4 GiB
// (CUDA) between rank pairs: both directions at once on CUDA; on the host
// runtime from the even rank to the odd one (each process then holds half
// the gigabytes, and CI's wall time halves: page faults dominate there).
void caseLarge(World& w) {
  if (w.nranks % 2 != 0) return;
  const int peer = w.rank ^ 1;
  const bool cuda = onCuda();
  const bool sends = cuda || w.rank % 2 == 0, receives = cuda || w.rank % 2 == 1;
  const size_t bytes = cuda ? (size_t{5} << 30) + 4099 : (size_t{1} << 31) + 4099;
  for (BufferKind kind : {BufferKind::Plain, BufferKind::Mapped}) {
    if (!cuda && kind == BufferKind::Mapped) continue;  // host: one size class is enough
    std::unique_ptr<Message> out, in;
    if (sends) {
      out = std::make_unique<Message>(w, 8000, w.rank, peer, bytes, kind);
      out->fillAsSender();
    }
    if (receives) {
      in = std::make_unique<Message>(w, 8000, peer, w.rank, bytes, kind);
      in->poison();
    }
    auto start = Clock::now();
    EXPECT_OK(ncclGroupStart());
    if (sends) EXPECT_OK(ncclSend(out->buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
    if (receives) EXPECT_OK(ncclRecv(in->buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    printf("large message of %zu bytes (%s) in %.3f s\n", bytes,
           kind == BufferKind::Mapped ? "zero-copy" : "FIFO", secondsSince(start));
    if (receives) in->verify("large");
  }
}

// Sends that can never be received, then abort: everything returns promptly.
void caseAbortInFlight(World& w) {
  if (w.nranks % 2 != 0) return;
  const size_t bytes = 64 << 20;
  Message out(w, 9000, w.rank, w.rank ^ 1, bytes, BufferKind::Plain);
  out.fillAsSender();
  if (w.rank % 2 == 0)
    EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclInt8, w.rank ^ 1, w.comm, w.stream));
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto start = Clock::now();
  EXPECT_OK(ncclCommAbort(w.comm));
  w.comm = nullptr;
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  double s = secondsSince(start);
  printf("abort with a send in flight returned in %.3f s\n", s);
  EXPECT_TRUE(s < 5.0, "abort took %.2f s", s);
}

// A send whose receive is never posted fails after FERRY_P2P_TIMEOUT (the
// test sets 2 s): the sender's stream is released and its communicator
// reports the error; nothing hangs.
void caseTimeout(World& w) {
  if (w.nranks % 2 != 0) return;
  // Across emulated hosts (FERRY_TEST_RANKS_PER_HOST) a send completes on
  // its stream once its bytes are staged, and the network takes what fits
  // in its buffers: the message must not fit (256 MiB over loopback TCP),
  // and the timeout shows as the communicator's async error only.
  const bool net = onOtherHost(w.rank, w.rank ^ 1);
  const size_t bytes = net ? size_t{256} << 20 : 1 << 20;
  Message out(w, 9100, w.rank, w.rank ^ 1, bytes, BufferKind::Plain);
  out.fillAsSender();
  auto start = Clock::now();
  if (w.rank % 2 == 0) {
    EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclInt8, w.rank ^ 1, w.comm, w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    ncclResult_t state = ncclSuccess;
    EXPECT_OK(ncclCommGetAsyncError(w.comm, &state));
    while (net && state == ncclSuccess && secondsSince(start) < 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_OK(ncclCommGetAsyncError(w.comm, &state));
    }
    double s = secondsSince(start);
    printf("unmatched send %s after %.2f s, async error: %s\n", net ? "failed" : "released", s,
           ncclGetErrorString(state));
    EXPECT_TRUE(state == ncclSystemError, "async error %d", state);
    EXPECT_TRUE(s >= 1.5 && s < 20, "released after %.2f s (timeout 2 s)", s);
  } else {
    // Stay alive past the timeout: a vanished peer would fail the send
    // earlier, with ncclRemoteError, and this case tests the timeout. Across
    // hosts the proxy notices it on a loaded 2-core CI machine only after
    // seconds (4.3 s seen with a 2 s timeout): wait longer there.
    std::this_thread::sleep_for(std::chrono::seconds(net ? 10 : 4));
  }
}

int ranksPerTestHost() {
  const char* k = getenv("FERRY_TEST_RANKS_PER_HOST");
  return k != nullptr && atoi(k) > 0 ? atoi(k) : 0;
}

bool onOtherHost(int a, int b) {
  const int k = ranksPerTestHost();
  return k > 0 && a / k != b / k;
}

int runCase(int argc, char** argv,
            const std::map<std::string, std::function<void(World&)>>& cases) {
  if (argc != 2 || cases.count(argv[1]) == 0) {
    fprintf(stderr, "usage: ferry-run -n N %s <case>\n", argv[0]);
    return 2;
  }
  LaunchEnv env;
  std::string error;
  if (!readLaunchEnv(&env, &error)) {
    fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  // Emulated hosts (NCCL_HOSTID), so peers on other "hosts" go through the
  // network engine. Set before the first library call reads knobs.
  if (const int k = ranksPerTestHost(); k > 0) {
    const std::string host = "ferry-test-host" + std::to_string(env.rank / k);
    setenv("NCCL_HOSTID", host.c_str(), 1);
  }
  int ndev = 0;
  if (ncclFerryGetDeviceCount(&ndev) == ncclSuccess && ndev > 0) {
    (void)ncclFerrySetDevice((env.device >= 0 ? env.device : env.localRank) % ndev);
  }
  World w;
  w.rank = env.rank;
  w.nranks = env.nranks;
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  EXPECT_OK(ncclCommInitRank(&w.comm, w.nranks, id, w.rank));
  if (gFailures > 0) return 1;
  std::vector<uint64_t> seeds(w.nranks, 0);
  seeds[w.rank] = testSeed();
  EXPECT_OK(ncclFerryBootstrapAllGather(w.comm, seeds.data(), sizeof(uint64_t)));
  w.seed = seeds[0];
  EXPECT_OK(ncclFerryStreamCreate(&w.stream));
  cases.at(argv[1])(w);
  w.destroy();
  EXPECT_OK(ncclFerryStreamDestroy(w.stream));
  printf("%s %s: %d failure(s)\n", gFailures == 0 ? "PASS" : "FAIL", argv[1], gFailures.load());
  return gFailures == 0 ? 0 : 1;
}

// In-place exchanges in one group, whatever path each message takes: each
// round every rank sends one buffer to the next rank and receives into the
// same buffer from the previous one (2 ranks: a swap), sizes from LL kernel
// p2p through the FIFO protocol to SM-free; odd rounds receive at an offset
// into the send's bytes (a partial overlap). Catches a receive that lands
// before its own rank's send has read the bytes (kernel p2p runs send and
// receive blocks at once: CollEngine stages such sends first).
void caseInPlace(World& w) {
  const int next = (w.rank + 1) % w.nranks, prev = (w.rank + w.nranks - 1) % w.nranks;
  Rng rng(w.seed, 77);
  const size_t sizes[] = {1, 1000, 40 << 10, 300 << 10, 1 << 20, 3 << 20, 6 << 20};
  for (uint64_t round = 0; round < 24; ++round) {
    const size_t base = sizes[round % (sizeof(sizes) / sizeof(sizes[0]))];
    const size_t bytes = base + rng.below(base / 8 + 1);  // the same on every rank
    const size_t shift = round % 2 == 1 ? std::min<size_t>(bytes / 3, 4096) : 0;
    TestBuffer both(bytes + shift, BufferKind::Mapped);
    std::vector<uint8_t> mine(bytes), theirs(bytes);
    expectedPayload(w, 1200 + round, w.rank, next, mine.data(), bytes);
    std::vector<uint8_t> init(bytes + shift, 0x5a);
    std::copy(mine.begin(), mine.end(), init.begin());
    both.upload(init.data(), init.size());
    auto* p = static_cast<uint8_t*>(both.data());
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(p, bytes, ncclUint8, next, w.comm, w.stream));
    EXPECT_OK(ncclRecv(p + shift, bytes, ncclUint8, prev, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    std::vector<uint8_t> got(bytes + shift);
    both.download(got.data(), got.size());
    expectedPayload(w, 1200 + round, prev, w.rank, theirs.data(), bytes);
    // The shifted receive leaves the send's first `shift` bytes as they were.
    size_t bad = SIZE_MAX;
    for (size_t i = 0; i < got.size() && bad == SIZE_MAX; ++i) {
      const uint8_t want = i < shift ? mine[i] : theirs[i - shift];
      if (got[i] != want) bad = i;
    }
    EXPECT_TRUE(bad == SIZE_MAX, "inplace: round %llu (%zu bytes, shift %zu): byte %zu is 0x%02x",
                static_cast<unsigned long long>(round), bytes, shift, bad,
                bad == SIZE_MAX ? 0 : got[bad]);
  }
}

// An overlap across the two paths, on one stream: each rank sends a large
// message (SM-free, above FERRY_P2P_KERNEL_MAX_BYTES) from `buf` and
// receives a small one (kernel p2p) into `buf` in the same group, with the
// other halves of both exchanges in buffers of their own. The kernel runs
// first: unless the large send is copied aside before it, the small
// receive overwrites bytes the large send has not read yet. Every third
// round the large messages go on a second stream (the copy aside is then
// ordered before the kernel by an event).
void caseInPlaceMixed(World& w) {
  const int next = (w.rank + 1) % w.nranks, prev = (w.rank + w.nranks - 1) % w.nranks;
  Rng rng(w.seed, 78);
  cudaStream_t other = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&other));
  for (uint64_t round = 0; round < 6; ++round) {
    cudaStream_t bigStream = round % 3 == 2 ? other : w.stream;
    const size_t big = (size_t{5} << 20) + rng.below(1 << 16);
    const size_t small = (size_t{1} << 20) + rng.below(1 << 16);
    const size_t shift = round % 2 == 1 ? 4096 : 0;
    TestBuffer buf(big, BufferKind::Mapped);
    Message smallOut(w, 1400 + round, w.rank, next, small, BufferKind::Mapped);
    Message bigIn(w, 1500 + round, prev, w.rank, big, BufferKind::Mapped);
    std::vector<uint8_t> mine(big), theirs(small);
    expectedPayload(w, 1500 + round, w.rank, next, mine.data(), big);
    buf.upload(mine.data(), big);
    smallOut.fillAsSender();
    bigIn.poison();
    auto* p = static_cast<uint8_t*>(buf.data());
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(p, big, ncclUint8, next, w.comm, bigStream));
    EXPECT_OK(ncclSend(smallOut.buf.data(), small, ncclUint8, next, w.comm, w.stream));
    EXPECT_OK(ncclRecv(bigIn.buf.data(), big, ncclUint8, prev, w.comm, bigStream));
    EXPECT_OK(ncclRecv(p + shift, small, ncclUint8, prev, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(other));
    bigIn.verify("inplacemix: the large message, sent from bytes a small receive overwrote");
    std::vector<uint8_t> got(big);
    buf.download(got.data(), big);
    expectedPayload(w, 1400 + round, prev, w.rank, theirs.data(), small);
    size_t bad = SIZE_MAX;
    for (size_t i = 0; i < big && bad == SIZE_MAX; ++i) {
      const bool received = i >= shift && i < shift + small;
      if (got[i] != (received ? theirs[i - shift] : mine[i])) bad = i;
    }
    EXPECT_TRUE(bad == SIZE_MAX, "inplacemix: round %llu: byte %zu of the shared buffer",
                static_cast<unsigned long long>(round), bad);
  }
  EXPECT_OK(ncclFerryStreamDestroy(other));
}

bool stagedPairsOrSkip(const World& w, const char* name) {
  const char* stage = getenv("FERRY_P2P_STAGE_SENDS");
  if (w.nranks % 2 == 0 && stage != nullptr && strcmp(stage, "1") == 0) return true;
  printf("%s: skipped (needs an even rank count and FERRY_P2P_STAGE_SENDS=1)\n", name);
  return false;
}

// An exchange whose odd rank posts late (it sleeps 20 ms before each
// group), sends staged (FERRY_P2P_STAGE_SENDS=1). With
// FERRY_P2P_PUSH_WAIT_MIN_US above that lateness, the early rank's push
// wait sees the receive posted, so every send on both sides goes straight
// into the receiver's buffer (FERRY_TEST_EXPECT_PUSHES=1 checks that); with
// the size-based bound alone (~3 us for 1 MiB) the early rank's sends are
// staged (FERRY_TEST_EXPECT_PUSHES=0 checks that the early rank staged some).
// FERRY_TEST_BUSY=1: the even rank's stream first waits for a small message
// the late rank sends after its sleep, so that stream is busy at the push
// wait (FERRY_P2P_PUSH_WAIT_BUSY lets such a wait take its whole bound).
// FERRY_TEST_TOKEN_MS=k: the token comes k ms in, so the even rank's stream
// goes idle during its wait (FERRY_P2P_PUSH_WAIT_BUSY=2 then ends it).
void caseLateExchange(World& w) {
  if (!stagedPairsOrSkip(w, "lateexchange")) return;
  const int peer = w.rank ^ 1;
  const bool busy = getenv("FERRY_TEST_BUSY") != nullptr;
  const char* early = getenv("FERRY_TEST_TOKEN_MS");  // the token this early (ms), not at 20
  const int tokenMs = early != nullptr ? std::min(20, std::max(0, atoi(early))) : 20;
  for (int round = 0; round < 8; ++round) {
    const size_t bytes = (size_t{1} << 20) + 4099 * static_cast<size_t>(round);
    Message out(w, 800 + round, w.rank, peer, bytes, BufferKind::Mapped);
    Message in(w, 800 + round, peer, w.rank, bytes, BufferKind::Mapped);
    Message token(w, 900 + round, 1, 0, 4096 + 8 * round, BufferKind::Mapped);
    out.fillAsSender();
    in.poison();
    token.fillAsSender();
    if (w.rank == 0) token.poison();
    EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
    if (busy && w.rank == 0) {  // returns at once; the stream waits
      EXPECT_OK(ncclRecv(token.buf.data(), token.bytes, ncclUint8, 1, w.comm, w.stream));
    }
    if (w.rank % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(tokenMs));
    if (busy && w.rank == 1) {
      EXPECT_OK(ncclSend(token.buf.data(), token.bytes, ncclUint8, 0, w.comm, w.stream));
    }
    if (w.rank % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20 - tokenMs));
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(out.buf.data(), bytes, ncclUint8, peer, w.comm, w.stream));
    EXPECT_OK(ncclRecv(in.buf.data(), bytes, ncclUint8, peer, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    in.verify("lateexchange");
    if (busy && w.rank == 0) token.verify("lateexchange token");
  }
  const char* e = getenv("FERRY_TEST_EXPECT_PUSHES");
  if (e == nullptr) return;
  ncclFerryPeerStats_t st{};
  EXPECT_OK(ncclFerryCommPeerStats(w.comm, peer, &st));
  const bool all =
      st.sendOps == (busy && w.rank == 1 ? 16u : 8u) && st.sendZeroCopyOps == st.sendOps;
  if (strcmp(e, "1") == 0 || w.rank % 2 == 1) {
    EXPECT_TRUE(all, "rank %d: %llu of %llu sends went straight into the receiver's buffer", w.rank,
                st.sendZeroCopyOps, st.sendOps);
  } else {
    EXPECT_TRUE(!all,
                "rank %d: all %llu sends went straight into the receiver's buffer, yet "
                "its peer came 20 ms late and the push wait had no floor",
                w.rank, st.sendOps);
  }
}

// One rank exchanges 2 MiB with every other rank in one group; the others
// post 150 ms late. The early rank's push waits (one per send: an exchange)
// share one bound per launch (FERRY_P2P_PUSH_WAIT_US; the test sets 40 ms):
// its CPU profile's p2p.pushwait total stays near one bound per round
// instead of one per peer (p2p.pushwait.launch.n4 reads it).
void caseLateMany(World& w) {
  if (w.nranks < 3) {
    printf("latemany: skipped (needs 3 or more ranks)\n");
    return;
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<Message>> outs, ins;
    const int first = w.rank == 0 ? 1 : 0, last = w.rank == 0 ? w.nranks - 1 : 0;
    for (int p = first; p <= last; ++p) {
      const size_t mine = (size_t{2} << 20) + 4099 * static_cast<size_t>(round + w.rank);
      const size_t theirs = (size_t{2} << 20) + 4099 * static_cast<size_t>(round + p);
      outs.push_back(
          std::make_unique<Message>(w, 1000 + round, w.rank, p, mine, BufferKind::Mapped));
      ins.push_back(
          std::make_unique<Message>(w, 1000 + round, p, w.rank, theirs, BufferKind::Mapped));
      outs.back()->fillAsSender();
      ins.back()->poison();
    }
    EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
    if (w.rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_OK(ncclGroupStart());
    for (size_t k = 0; k < outs.size(); ++k) {
      const int p = first + static_cast<int>(k);
      EXPECT_OK(ncclSend(outs[k]->buf.data(), outs[k]->bytes, ncclUint8, p, w.comm, w.stream));
      EXPECT_OK(ncclRecv(ins[k]->buf.data(), ins[k]->bytes, ncclUint8, p, w.comm, w.stream));
    }
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    for (auto& in : ins) in->verify("latemany");
  }
}

}  // namespace ferry::test
