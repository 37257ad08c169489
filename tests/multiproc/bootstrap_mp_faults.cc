// Fault cases of bootstrap_mp: strangers on the root's and the ranks'
// sockets, a missing rank, a duplicate rank, and abort during create.
#include <memory>

#include "bootstrap/ring_bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap_mp_util.h"

namespace ferry::boot::mp {
namespace {

// Stranger connections stay open this long: longer than the ranks need,
// shorter than the ctest timeout.
constexpr int kStrangerHoldMs = 8000;

UniqueIdInfo decodeId(const ncclUniqueId& id) {
  UniqueIdInfo info;
  (void)decodeUniqueId(id, &info);
  return info;
}

bool waitFlag(const std::atomic<int>& flag, int want, int64_t timeoutMs) {
  int64_t end = nowMs() + timeoutMs;
  while (flag.load() < want) {
    if (nowMs() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Attacks every target with each kind plus a silent connection, then holds.
int strangerMain(const std::vector<SocketAddress>& targets, uint64_t magic, bool ringKinds) {
  std::vector<Socket> held;
  for (const SocketAddress& t : targets) {
    held.push_back(attack(t, Attack::kGarbage, magic));
    held.push_back(attack(t, Attack::kWrongMagic, magic));
    held.push_back(attack(t, Attack::kHalfMessage, magic));
    if (ringKinds) held.push_back(attack(t, Attack::kRightMagicBadHello, magic));
    Socket silent;
    (void)Socket::connect(t, WaitContext::make(5000, nullptr), "silent", &silent);
    held.push_back(std::move(silent));
  }
  for (const Socket& s : held) MP_CHECK(s.valid(), "a stranger could not connect");
  shared()->strangersDone.store(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(kStrangerHoldMs));
  return 0;
}

}  // namespace

int caseRootAttack(int nranks) {
  BootstrapOptions o;
  o.timeoutMs = 30000;
  ncclUniqueId id;
  MP_CHECK(createUniqueId(o, &id) == ncclSuccess, "createUniqueId");
  UniqueIdInfo info = decodeId(id);
  auto stranger = spawn(1, [&](int) { return strangerMain({info.root}, info.magic, false); });
  // Real ranks start only once the strangers hold their connections, and must
  // form the communicator far sooner than the 5 s a silent stranger may keep
  // its slot, let alone the 30 s timeout.
  auto ranks = spawn(nranks, [&](int r) {
    MP_CHECK(waitFlag(shared()->strangersDone, 1, 10000), "strangers did not attack");
    return rankMain(id, r, nranks, o, 3000, nullptr);
  });
  int rc = expectAll(waitAll(ranks, 60000));
  return rc | expectAll(waitAll(stranger, 20000));
}

int caseRingAttack(int nranks) {
  BootstrapOptions o;
  o.timeoutMs = 30000;
  ncclUniqueId id;
  MP_CHECK(createUniqueId(o, &id) == ncclSuccess, "createUniqueId");
  UniqueIdInfo info = decodeId(id);
  Shared* sh = shared();
  auto stranger = spawn(1, [&](int) {
    MP_CHECK(waitFlag(sh->addrsReady, nranks, 20000), "ranks did not publish addresses");
    std::vector<SocketAddress> targets(nranks);
    for (int r = 0; r < nranks; ++r) {
      MP_CHECK(SocketAddress::parse(sh->addrs[r], &targets[r]) == ncclSuccess, "addr %s",
               sh->addrs[r]);
    }
    return strangerMain(targets, info.magic, true);
  });
  auto ranks = spawn(nranks, [&](int r) {
    auto hook = [&](Bootstrap& b) {
      auto* ring = dynamic_cast<RingBootstrap*>(&b);
      MP_CHECK(ring != nullptr, "not a RingBootstrap");
      snprintf(sh->addrs[r], sizeof(sh->addrs[r]), "%s", ring->listenAddress().toString().c_str());
      sh->addrsReady.fetch_add(1);
      MP_CHECK(waitFlag(sh->strangersDone, 1, 20000), "strangers did not attack");
      // With the strangers' connections pending on every rank, collectives
      // and new peer connections proceed at full speed: far below the 5 s a
      // silent stranger may hold a slot.
      int64_t t0 = nowMs();
      std::vector<uint64_t> slots(nranks, ~0ull);
      slots[r] = 0x1000 + r;
      MP_CHECK(b.allGather(slots.data(), sizeof(uint64_t)) == ncclSuccess, "allGather");
      for (int k = 0; k < nranks; ++k) MP_CHECK(slots[k] == 0x1000u + k, "slot %d", k);
      int peer = (r + nranks / 2) % nranks, from = (r - nranks / 2 + nranks) % nranks;
      uint64_t out = 0x2000 + r, in = 0;
      MP_CHECK(b.send(peer, kUserTagBase, &out, sizeof(out)) == ncclSuccess, "send");
      MP_CHECK(b.recv(from, kUserTagBase, &in, sizeof(in)) == ncclSuccess, "recv");
      MP_CHECK(in == 0x2000u + from, "recv value");
      MP_CHECK(b.barrier() == ncclSuccess, "barrier");
      int64_t took = nowMs() - t0;
      MP_CHECK(took < 2000, "rank %d: first operations under attack took %lld ms", r,
               static_cast<long long>(took));
      // Let the silent connections pass their 5 s hello deadline (they are
      // dropped with a WARN) while the strangers still hold them open; the
      // full exercise then runs.
      std::this_thread::sleep_for(std::chrono::milliseconds(5300));
      return 0;
    };
    int rc = rankMain(id, r, nranks, o, 10000, hook);
    return rc;
  });
  int rc = expectAll(waitAll(ranks, 60000));
  return rc | expectAll(waitAll(stranger, 30000));
}

// Ranks in `ranks` start; each must fail with an error after roughly the
// 2 s timeout (not at once, unless `earlyOk`, and never hang).
int expectFailures(const std::vector<int>& rankIds, int nranks, int64_t minMs, int64_t maxMs,
                   int maxEarly) {
  BootstrapOptions o;
  o.timeoutMs = 2000;
  ncclUniqueId id;
  MP_CHECK(createUniqueId(o, &id) == ncclSuccess, "createUniqueId");
  std::atomic<int>& early = shared()->barrierCount;  // count of fast failures
  auto pids = spawn(static_cast<int>(rankIds.size()), [&](int i) {
    int rank = rankIds[i];
    int64_t t0 = nowMs();
    std::unique_ptr<Bootstrap> b;
    Status st = Bootstrap::create(id, rank, nranks, o, &b);
    int64_t took = nowMs() - t0;
    fprintf(stderr, "rank %d: create -> %d after %lld ms\n", rank, st,
            static_cast<long long>(took));
    MP_CHECK(st != ncclSuccess, "rank %d formed a communicator without all ranks", rank);
    MP_CHECK(took < maxMs, "rank %d took %lld ms to fail", rank, static_cast<long long>(took));
    if (took < minMs) {
      MP_CHECK(early.fetch_add(1) < maxEarly, "rank %d failed too early (%lld ms)", rank,
               static_cast<long long>(took));
    }
    return 0;
  });
  return expectAll(waitAll(pids, 30000));
}

int caseMissing(int nranks) {
  std::vector<int> present;
  for (int r = 0; r < nranks - 1; ++r) present.push_back(r);  // the last rank never comes
  return expectFailures(present, nranks, 1500, 5000, 0);
}

int caseDupRank(int nranks) {
  // Ranks 0..n-2 plus a second rank 1: the duplicate is rejected at once,
  // the others fail when the root gives up on rank n-1.
  std::vector<int> ranks;
  for (int r = 0; r < nranks - 1; ++r) ranks.push_back(r);
  ranks.push_back(1);
  return expectFailures(ranks, nranks, 1500, 5000, 1);
}

int caseAbort() {
  BootstrapOptions o;
  o.timeoutMs = 60000;
  ncclUniqueId id;
  MP_CHECK(createUniqueId(o, &id) == ncclSuccess, "createUniqueId");
  auto pids = spawn(1, [&](int) {
    std::atomic<bool> abortFlag{false};
    BootstrapOptions ro = o;
    ro.abortFlag = &abortFlag;
    int64_t setAt = 0;
    std::thread setter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      setAt = nowMs();
      abortFlag.store(true);
    });
    std::unique_ptr<Bootstrap> b;
    Status st = Bootstrap::create(id, 0, 2, ro, &b);  // rank 1 never comes
    int64_t doneAt = nowMs();
    setter.join();
    fprintf(stderr, "abort: create -> %d, %lld ms after the flag\n", st,
            static_cast<long long>(doneAt - setAt));
    MP_CHECK(st == ncclInternalError, "create returned %d, want ncclInternalError", st);
    MP_CHECK(doneAt - setAt < 1000, "took %lld ms after abort",
             static_cast<long long>(doneAt - setAt));
    return 0;
  });
  return expectAll(waitAll(pids, 30000));
}

}  // namespace ferry::boot::mp
