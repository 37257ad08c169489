// Multi-process bootstrap tests: ranks are fork()ed children of this program
// (no launcher). Usage: bootstrap_mp <case> <nranks>. Cases:
//   basic      create, all-gather, tagged send/recv in random order, barrier
//   ipv6       basic over AF_INET6 (exit 77 = skipped when no IPv6 address)
//   commid     NCCL_COMM_ID mode: every process derives the id, rank 0 serves
//   root_attack strangers send garbage / wrong magic / half a hello to the root
//   ring_attack the same, plus a right-magic bad hello, on every rank's socket
//   missing    one rank never comes: the others fail after ~2 s
//   duprank    two processes claim one rank: all fail with an error, no hang
//   abort      abortFlag set during create: returns within 1 s
// Fresh random data each run (seed printed; FERRY_TEST_SEED reproduces).
#include <algorithm>
#include <map>
#include <memory>

#include "bootstrap/bootstrap.h"
#include "bootstrap/ring_bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap_mp_util.h"
#include "common/proc.h"
#include "common/random.h"

namespace ferry::boot::mp {
namespace {

constexpr int kSkip = 77;
uint64_t gSeed = 0;
Shared* gShared = nullptr;

std::vector<uint8_t> randomBytes(uint64_t stream, size_t n) {
  test::Rng rng(gSeed, stream);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng.next());
  return v;
}

int checkAllGather(Bootstrap& b, size_t bytesPerRank, uint64_t round) {
  int n = b.nranks();
  std::vector<uint8_t> buf(bytesPerRank * n, 0xA5);  // poison
  auto mine = randomBytes(1000 + round * 64 + b.rank(), bytesPerRank);
  std::copy(mine.begin(), mine.end(), buf.begin() + b.rank() * bytesPerRank);
  MP_CHECK(b.allGather(buf.data(), bytesPerRank) == ncclSuccess, "allGather %zu", bytesPerRank);
  for (int r = 0; r < n; ++r) {
    auto want = randomBytes(1000 + round * 64 + r, bytesPerRank);
    MP_CHECK(std::equal(want.begin(), want.end(), buf.begin() + r * bytesPerRank),
             "allGather slot %d of %zu bytes differs", r, bytesPerRank);
  }
  return 0;
}

struct Msg {
  uint32_t tag;
  size_t size;
  uint64_t stream;
};

// The messages src sends to dst, identical on both sides.
std::vector<Msg> plan(int src, int dst, int nranks) {
  test::Rng rng(gSeed, 0x5000 + src * 64 + dst);
  std::vector<Msg> out(rng.range(1, 5));
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t pick = rng.below(10);
    size_t size = pick == 0 ? 0 : pick == 1 ? (1u << 20) : pick == 2 ? 1 : rng.range(2, 70000);
    out[i] = Msg{kUserTagBase + static_cast<uint32_t>(rng.below(3)), size,
                 0x9000000ull + (static_cast<uint64_t>(src) * nranks + dst) * 64 + i};
  }
  return out;
}

int checkSendRecv(Bootstrap& b) {
  int me = b.rank(), n = b.nranks();
  test::Rng order(gSeed, 0x7000 + me);
  // Sends: random interleaving over destinations, in plan order per dst.
  std::map<int, std::vector<Msg>> toSend;
  for (int d = 0; d < n; ++d) {
    if (d != me) toSend[d] = plan(me, d, n);
  }
  std::map<int, size_t> sent;
  for (;;) {
    std::vector<int> open;
    for (auto& [d, msgs] : toSend) {
      if (sent[d] < msgs.size()) open.push_back(d);
    }
    if (open.empty()) break;
    int d = open[order.below(open.size())];
    const Msg& m = toSend[d][sent[d]++];
    auto data = randomBytes(m.stream, m.size);
    MP_CHECK(b.send(d, m.tag, data.data(), m.size) == ncclSuccess, "send to %d", d);
  }
  // Receives: random interleaving over (src, tag) queues, in order per queue.
  std::map<std::pair<int, uint32_t>, std::vector<Msg>> queues;
  for (int s = 0; s < n; ++s) {
    if (s == me) continue;
    for (const Msg& m : plan(s, me, n)) queues[{s, m.tag}].push_back(m);
  }
  for (;;) {
    std::vector<std::pair<int, uint32_t>> open;
    for (auto& [k, q] : queues) {
      if (!q.empty()) open.push_back(k);
    }
    if (open.empty()) break;
    auto k = open[order.below(open.size())];
    Msg m = queues[k].front();
    queues[k].erase(queues[k].begin());
    std::vector<uint8_t> got(m.size + 1, 0xA5);
    MP_CHECK(b.recv(k.first, m.tag, got.data(), m.size) == ncclSuccess, "recv from %d tag %u",
             k.first, m.tag);
    auto want = randomBytes(m.stream, m.size);
    MP_CHECK(std::equal(want.begin(), want.end(), got.begin()) && got[m.size] == 0xA5,
             "message from %d tag %u size %zu differs", k.first, m.tag, m.size);
  }
  // A size mismatch is an error (ncclInvalidUsage), not a silent truncation.
  if (n > 1) {
    int succ = (me + 1) % n, pred = (me + n - 1) % n;
    uint8_t two[2] = {1, 2}, one[1];
    MP_CHECK(b.send(succ, kUserTagBase + 77, two, 2) == ncclSuccess, "send");
    MP_CHECK(b.recv(pred, kUserTagBase + 77, one, 1) == ncclInvalidUsage, "size mismatch");
    MP_CHECK(b.send(succ, 5, two, 2) == ncclInvalidArgument, "reserved tag");
  }
  return 0;
}

int checkBarrier(Bootstrap& b, int rounds) {
  test::Rng rng(gSeed, 0x8000 + b.rank());
  for (int i = 0; i < rounds; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(rng.below(30)));
    gShared->barrierCount.fetch_add(1);
    MP_CHECK(b.barrier() == ncclSuccess, "barrier %d", i);
    int seen = gShared->barrierCount.load();
    MP_CHECK(seen >= b.nranks() * (i + 1), "barrier %d returned early: %d arrivals", i, seen);
    // A second barrier so no rank starts round i+1's count before all checked.
    MP_CHECK(b.barrier() == ncclSuccess, "barrier %d bis", i);
  }
  return 0;
}

int exercise(Bootstrap& b) {
  for (size_t bytes : {size_t(1), size_t(24), size_t(4096 + 3), size_t(200000)}) {
    if (checkAllGather(b, bytes, bytes % 61) != 0) return 1;
  }
  if (checkSendRecv(b) != 0) return 1;
  return checkBarrier(b, 3);
}

BootstrapOptions baseOptions(int64_t timeoutMs) {
  BootstrapOptions o;
  o.timeoutMs = timeoutMs;
  return o;
}

}  // namespace

// One rank: create, (hook), exercise, destroy; checks for fd and thread leaks.
int rankMain(const ncclUniqueId& id, int rank, int nranks, const BootstrapOptions& o,
             int64_t maxCreateMs, const std::function<int(Bootstrap&)>& afterCreate) {
  int fds0 = test::countOpenFds();
  int64_t t0 = nowMs();
  {
    std::unique_ptr<Bootstrap> b;
    Status st = Bootstrap::create(id, rank, nranks, o, &b);
    MP_CHECK(st == ncclSuccess, "rank %d create failed: %d", rank, st);
    int64_t took = nowMs() - t0;
    MP_CHECK(took < maxCreateMs, "rank %d create took %lld ms", rank, static_cast<long long>(took));
    MP_CHECK(b->rank() == rank && b->nranks() == nranks, "rank/nranks");
    if (afterCreate && afterCreate(*b) != 0) return 1;
    int64_t t1 = nowMs();
    if (exercise(*b) != 0) return 1;
    fprintf(stderr, "rank %d: create %lld ms, exercise %lld ms\n", rank,
            static_cast<long long>(took), static_cast<long long>(nowMs() - t1));
  }
  // Roots started by this process (rank 0 in commid mode) finish and join.
  for (int i = 0; i < 50 && liveRootCount() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    joinFinishedRoots();
  }
  MP_CHECK(liveRootCount() == 0, "root thread still alive");
  int fds1 = test::countOpenFds();
  MP_CHECK(fds1 == fds0, "fd leak: %d before, %d after", fds0, fds1);
  return 0;
}

namespace {

int expectAllOk(const std::vector<int>& codes) {
  int bad = 0;
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] != 0) {
      fprintf(stderr, "process %zu exited with %d\n", i, codes[i]);
      ++bad;
    }
  }
  return bad ? 1 : 0;
}

int caseBasic(int nranks, const char* family) {
  BootstrapOptions o = baseOptions(60000);
  o.family = family;
  ncclUniqueId id;
  Status st = createUniqueId(o, &id);
  if (st != ncclSuccess && o.family == "AF_INET6") {
    fprintf(stderr, "SKIPPED: no usable IPv6 interface\n");
    return kSkip;
  }
  MP_CHECK(st == ncclSuccess, "createUniqueId");
  fprintf(stderr, "id: %s\n", describeUniqueId(id).c_str());
  auto pids = spawn(nranks, [&](int r) { return rankMain(id, r, nranks, o, 10000, nullptr); });
  int rc = expectAllOk(waitAll(pids, 100000));
  // The root thread of this process served its communicator and exits.
  for (int i = 0; i < 100 && liveRootCount() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    joinFinishedRoots();
  }
  MP_CHECK(liveRootCount() == 0, "root thread not finished");
  return rc;
}

int caseCommId(int nranks) {
  // A port that was free a moment ago.
  SocketAddress lo;
  MP_CHECK(SocketAddress::parse("127.0.0.1:0", &lo) == ncclSuccess, "parse");
  Socket probe;
  MP_CHECK(Socket::listen(lo, true, &probe) == ncclSuccess, "probe");
  std::string commId = probe.localAddress().toString();
  probe.close();
  BootstrapOptions o = baseOptions(60000);
  o.commId = commId;
  ncclUniqueId parentId;
  MP_CHECK(createUniqueId(o, &parentId) == ncclSuccess, "createUniqueId");
  MP_CHECK(liveRootCount() == 0, "NCCL_COMM_ID mode must not start a root thread");
  fprintf(stderr, "commId %s -> %s\n", commId.c_str(), describeUniqueId(parentId).c_str());
  auto pids = spawn(nranks, [&](int r) {
    ncclUniqueId id;
    MP_CHECK(createUniqueId(o, &id) == ncclSuccess, "createUniqueId in rank %d", r);
    MP_CHECK(memcmp(&id, &parentId, sizeof(id)) == 0, "rank %d derived another id", r);
    // Rank 0 serves the root; the others may come first and must retry.
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return rankMain(id, r, nranks, o, 10000, nullptr);
  });
  return expectAllOk(waitAll(pids, 100000));
}

}  // namespace

int caseRootAttack(int nranks);
int caseRingAttack(int nranks);
int caseMissing(int nranks);
int caseDupRank(int nranks);
int caseAbort();

int run(const std::string& name, int nranks) {
  gSeed = test::testSeed();
  gShared = makeShared();
  if (gShared == nullptr) return 1;
  if (name == "basic") return caseBasic(nranks, "");
  if (name == "ipv6") return caseBasic(nranks, "AF_INET6");
  if (name == "commid") return caseCommId(nranks);
  if (name == "root_attack") return caseRootAttack(nranks);
  if (name == "ring_attack") return caseRingAttack(nranks);
  if (name == "missing") return caseMissing(nranks);
  if (name == "duprank") return caseDupRank(nranks);
  if (name == "abort") return caseAbort();
  fprintf(stderr, "unknown case %s\n", name.c_str());
  return 2;
}

// Shared with bootstrap_mp_faults.cc.
Shared* shared() {
  return gShared;
}
int expectAll(const std::vector<int>& codes) {
  return expectAllOk(codes);
}

}  // namespace ferry::boot::mp

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <case> <nranks>\n", argv[0]);
    return 2;
  }
  int rc = ferry::boot::mp::run(argv[1], atoi(argv[2]));
  fprintf(stderr, "%s %s n=%s\n", rc == 0 ? "PASSED" : (rc == 77 ? "SKIPPED" : "FAILED"), argv[1],
          argv[2]);
  return rc;
}
