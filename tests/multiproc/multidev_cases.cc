// One process driving several devices, as nccl-tests -g N, JAX and
// TensorFlow do: ncclCommInitAll, then every collective and point-to-point
// operation in groups spanning every communicator, each communicator on
// streams of its own device, all issued while ANOTHER device is current
// (the library must switch to each communicator's device and give the
// caller its device back). The host runtime enforces CUDA's rules (an event
// recorded on another device's stream, a kernel launched on a stream of a
// device that is not current: "invalid resource handle"), so this runs in
// CI; tests/gpu/multidev_gpu.cmake runs it on GPUs.
//
// Usage: mp_multidev <coll|p2p|mixed|nogroup|inplace|threads> [ndev]   (one process, no ferry-run)
//        ferry-run -n P [--hosts H] mp_multidev <case> ndev
// Case `threads` drives each communicator from a thread of its own instead,
// all at once (a communicator used by one thread at a time, as NCCL allows).
// Under ferry-run each of the P processes drives `ndev` devices (ranks
// p*ndev .. p*ndev+ndev-1), all made in one group of ncclCommInitRank calls
// as JAX's multi-host clients do: ranks in one process, in other processes
// of the host and (--hosts) on other emulated hosts, in the same groups.
// Every payload is fresh random data recomputed independently by the
// checker; outputs are poisoned first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coll_util.h"
#include "common/proc.h"
#include "common/random.h"
#include "ferry.h"
#include "mp_check.h"
#include "p2p_util.h"

namespace {

using namespace ferry::test;

struct Devices {
  int n = 0;       // devices (communicators) of this process
  int nranks = 0;  // ranks in all: n in one process, P x n under ferry-run
  int first = 0;   // this process's first rank; device d is rank first + d
  int caller = 0;  // the device current whenever the library is called
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams, streams2;
  std::vector<World> worlds;
};

// This process's first device: processes of one host drive disjoint runs of
// devices (rank x ndev, modulo the devices), as a real host's must.
int gDeviceBase = 0;

// Local device index d (0..n-1), i.e. the device gDeviceBase + d.
void setDevice(int d) {
  EXPECT_OK(ncclFerrySetDevice(gDeviceBase + d));
}

// The caller's device must be current again after every call.
void expectCaller(const Devices& g, const char* after) {
  int cur = -1;
  EXPECT_OK(ncclFerryGetDevice(&cur));
  EXPECT_TRUE(cur == gDeviceBase + g.caller, "after %s the current device is %d, expected %d",
              after, cur, gDeviceBase + g.caller);
}

// Device d's ring neighbours among all ranks.
int nextRank(const Devices& g, int d) {
  return (g.first + d + 1) % g.nranks;
}
int prevRank(const Devices& g, int d) {
  return (g.first + d + g.nranks - 1) % g.nranks;
}

void syncAll(const Devices& g) {
  for (int d = 0; d < g.n; ++d) {
    EXPECT_OK(ncclFerryStreamSynchronize(g.streams[d]));
    EXPECT_OK(ncclFerryStreamSynchronize(g.streams2[d]));
  }
}

// Every collective, random types/operators/counts/roots, one group over all
// communicators per round.
void caseColl(Devices& g, Rng& rng) {
  uint64_t tag = 1;
  for (int round = 0; round < 40; ++round) {
    CollSpec spec = randomSpec(rng, g.nranks, round % 5 == 4 ? (1 << 20) + 3 : 5000, tag++);
    spec.coll = kAllColls[round % 5];
    std::vector<std::unique_ptr<CollRun>> runs;
    for (int d = 0; d < g.n; ++d) {
      setDevice(d);  // buffers live on their communicator's device
      runs.push_back(std::make_unique<CollRun>(g.worlds[d], spec));
      runs.back()->prepare(g.comms[d]);
      uploadsDone();
    }
    setDevice(g.caller);
    EXPECT_OK(ncclGroupStart());
    for (int d = 0; d < g.n; ++d) runs[d]->post(g.comms[d], g.streams[d]);
    EXPECT_OK(ncclGroupEnd());
    expectCaller(g, "a group of collectives");
    for (int d = 0; d < g.n; ++d) runs[d]->releaseOp(g.comms[d]);
    syncAll(g);
    for (int d = 0; d < g.n; ++d) {
      setDevice(d);  // CUDA pool memory is readable with its own device current
      runs[d]->verify();
    }
    setDevice(g.caller);
  }
}

size_t randomBytes(Rng& rng) {
  switch (rng.below(4)) {
    case 0:
      return rng.below(64);  // zero and tiny messages
    case 1:
      return rng.below(64 << 10);  // kernel p2p, LL
    case 2:
      return rng.below(4 << 20);  // kernel p2p, FIFO protocol
    default:
      return (4 << 20) + 1 + rng.below(3 << 20);  // SM-free copy engines
  }
}

// All-to-all with random sizes and buffer kinds: every communicator sends to
// and receives from every other (and itself), one group over all of them,
// the calls of each communicator in random order; on two streams per device.
// Every process draws the same sizes, kinds and orders (one agreed seed,
// the same draws in the same order), and makes the messages of its own
// senders and receivers only: out[d][p] from device d to rank p, in[d][p]
// from rank p to device d.
void roundOfAlltoallv(Devices& g, Rng& rng, uint64_t round) {
  const int n = g.n, nr = g.nranks;
  std::vector<std::vector<std::unique_ptr<Message>>> out(n), in(n);
  for (int d = 0; d < n; ++d) {
    out[d].resize(nr);
    in[d].resize(nr);
  }
  std::vector<size_t> bytes(static_cast<size_t>(nr) * nr);
  for (auto& b : bytes) b = randomBytes(rng);
  for (int s = 0; s < nr; ++s) {
    for (int r = 0; r < nr; ++r) {
      BufferKind k = rng.below(2) ? BufferKind::Mapped : BufferKind::Plain;
      const int ds = s - g.first, dr = r - g.first;
      if (ds >= 0 && ds < n) {
        setDevice(ds);
        out[ds][r] = std::make_unique<Message>(g.worlds[ds], round, s, r, bytes[s * nr + r], k);
        out[ds][r]->fillAsSender();
      }
      if (dr >= 0 && dr < n) {
        setDevice(dr);
        in[dr][s] = std::make_unique<Message>(g.worlds[dr], round, s, r, bytes[s * nr + r], k);
        in[dr][s]->poison();
      }
    }
  }
  for (int d = 0; d < n; ++d) {
    setDevice(d);
    uploadsDone();
  }
  setDevice(g.caller);
  EXPECT_OK(ncclGroupStart());
  for (int d = 0; d < n; ++d) {
    std::vector<int> order(2 * nr);
    for (int i = 0; i < 2 * nr; ++i) order[i] = i;
    for (int i = 2 * nr - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    for (int k : order) {
      int p = k % nr;
      // A peer's messages stay on one stream (in-order matching per peer).
      cudaStream_t st = p % 2 ? g.streams[d] : g.streams2[d];
      if (k < nr) {
        Message& m = *out[d][p];
        EXPECT_OK(ncclSend(m.buf.data(), m.bytes, ncclInt8, p, g.comms[d], st));
      } else {
        Message& m = *in[d][p];
        EXPECT_OK(ncclRecv(m.buf.data(), m.bytes, ncclInt8, p, g.comms[d], st));
      }
    }
  }
  EXPECT_OK(ncclGroupEnd());
  expectCaller(g, "a group of sends and receives");
  syncAll(g);
  for (int d = 0; d < n; ++d) {
    setDevice(d);  // CUDA pool memory is readable with its own device current
    for (int s = 0; s < nr; ++s) in[d][s]->verify("multi-device alltoallv");
  }
  setDevice(g.caller);
}

// FERRY_TEST_EXPECT_PUSHES=1 (with every message SM-free): one thread's
// group over every communicator claims all receives before any send
// (P2pEngine::Step), so every send to another device finds its receiver
// posted and goes straight from its buffer into the receiver's: zero-copy,
// even where a send that came first would be staged (FERRY_P2P_STAGE_SENDS=1).
void expectPushes(const Devices& g) {
  const char* e = getenv("FERRY_TEST_EXPECT_PUSHES");
  if (e == nullptr || strcmp(e, "1") != 0) return;
  for (int d = 0; d < g.n; ++d) {
    for (int p = g.first; p < g.first + g.n; ++p) {
      if (p == g.first + d) continue;
      ncclFerryPeerStats_t st{};
      EXPECT_OK(ncclFerryCommPeerStats(g.comms[d], p, &st));
      EXPECT_TRUE(st.sendOps > 0 && st.sendZeroCopyOps == st.sendOps,
                  "rank %d -> %d: %llu of %llu sends went straight into the receiver's buffer",
                  g.first + d, p, st.sendZeroCopyOps, st.sendOps);
    }
  }
}

void caseP2p(Devices& g, Rng& rng) {
  for (uint64_t round = 0; round < 16; ++round) roundOfAlltoallv(g, rng, round);
  expectPushes(g);
}

// Collectives and point-to-point of every communicator in one group: an
// all-reduce on each device's first stream, a ring of sends on its second.
void caseMixed(Devices& g, Rng& rng) {
  const int n = g.n;
  uint64_t tag = 500;
  for (uint64_t round = 0; round < 12; ++round) {
    CollSpec spec = randomSpec(rng, g.nranks, 70000, tag++);
    spec.coll = Coll::AllReduce;
    std::vector<std::unique_ptr<CollRun>> runs;
    std::vector<std::unique_ptr<Message>> out, in;
    size_t bytes = randomBytes(rng);
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      runs.push_back(std::make_unique<CollRun>(g.worlds[d], spec));
      runs.back()->prepare(g.comms[d]);
      const int me = g.first + d;
      out.push_back(std::make_unique<Message>(g.worlds[d], 100 + round, me, nextRank(g, d), bytes,
                                              BufferKind::Mapped));
      out.back()->fillAsSender();
      in.push_back(std::make_unique<Message>(g.worlds[d], 100 + round, prevRank(g, d), me, bytes,
                                             BufferKind::Plain));
      in.back()->poison();
      uploadsDone();
    }
    setDevice(g.caller);
    EXPECT_OK(ncclGroupStart());
    for (int d = 0; d < n; ++d) {
      runs[d]->post(g.comms[d], g.streams[d]);
      EXPECT_OK(
          ncclSend(out[d]->buf.data(), bytes, ncclInt8, nextRank(g, d), g.comms[d], g.streams2[d]));
      EXPECT_OK(
          ncclRecv(in[d]->buf.data(), bytes, ncclInt8, prevRank(g, d), g.comms[d], g.streams2[d]));
    }
    EXPECT_OK(ncclGroupEnd());
    expectCaller(g, "a mixed group");
    for (int d = 0; d < n; ++d) runs[d]->releaseOp(g.comms[d]);
    syncAll(g);
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      runs[d]->verify();
      in[d]->verify("multi-device mixed ring");
    }
    setDevice(g.caller);
  }
}

// No groups: one communicator at a time from one thread, every send before
// any receive, then all-reduces. Each call returns without waiting for its
// peers. The messages are SM-free sized: a kernel p2p send larger than its
// FIFO holds its communicator's later kernels until received, as NCCL's
// would, so this order needs groups there.
void caseNoGroup(Devices& g, Rng& rng) {
  const int n = g.n;
  for (uint64_t round = 0; round < 8; ++round) {
    size_t bytes = (size_t{4} << 20) + 1 + rng.below(size_t{3} << 20);
    std::vector<std::unique_ptr<Message>> out, in;
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      const int me = g.first + d;
      out.push_back(std::make_unique<Message>(g.worlds[d], 300 + round, me, nextRank(g, d), bytes,
                                              BufferKind::Mapped));
      out.back()->fillAsSender();
      in.push_back(std::make_unique<Message>(g.worlds[d], 300 + round, prevRank(g, d), me, bytes,
                                             BufferKind::Mapped));
      in.back()->poison();
      uploadsDone();
    }
    setDevice(g.caller);
    for (int d = 0; d < n; ++d) {
      EXPECT_OK(
          ncclSend(out[d]->buf.data(), bytes, ncclInt8, nextRank(g, d), g.comms[d], g.streams[d]));
      expectCaller(g, "ncclSend");
    }
    for (int d = 0; d < n; ++d) {
      EXPECT_OK(
          ncclRecv(in[d]->buf.data(), bytes, ncclInt8, prevRank(g, d), g.comms[d], g.streams2[d]));
    }
    CollSpec spec = randomSpec(rng, g.nranks, 3000, 900 + round);
    spec.coll = Coll::AllReduce;
    std::vector<std::unique_ptr<CollRun>> runs;
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      runs.push_back(std::make_unique<CollRun>(g.worlds[d], spec));
      runs.back()->prepare(g.comms[d]);
      uploadsDone();
    }
    setDevice(g.caller);
    for (int d = 0; d < n; ++d) {
      runs[d]->post(g.comms[d], g.streams[d]);
      expectCaller(g, "a collective outside a group");
    }
    for (int d = 0; d < n; ++d) runs[d]->releaseOp(g.comms[d]);
    syncAll(g);
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      in[d]->verify("multi-device, no group");
      runs[d]->verify();
    }
    setDevice(g.caller);
  }
}

// In-place rings in one group over every communicator: device d sends its
// buffer to d+1 and receives into the same buffer (whole, or shifted into
// the send's bytes) from d-1, at sizes on every path (LL and FIFO kernel
// p2p, SM-free). Peers in this process copy straight between each other's
// buffers unless the send is staged first: without that, d's bytes were
// overwritten by d-1's before d+1 read them (session 25).
void caseInPlaceRings(Devices& g, Rng& rng) {
  const int n = g.n;
  const size_t sizes[] = {3, 1500, 60 << 10, 700 << 10, 3 << 20, 5 << 20};
  for (uint64_t round = 0; round < 12; ++round) {
    const size_t base = sizes[round % (sizeof(sizes) / sizeof(sizes[0]))];
    const size_t bytes = base + rng.below(base / 8 + 1);
    const size_t shift = round % 2 == 1 ? std::min<size_t>(bytes / 3, 4096) : 0;
    std::vector<std::unique_ptr<TestBuffer>> bufs;
    // mine[d]: what device d sends; theirs[d]: what it receives.
    std::vector<std::vector<uint8_t>> mine(n, std::vector<uint8_t>(bytes)), theirs = mine;
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      bufs.push_back(std::make_unique<TestBuffer>(bytes + shift, BufferKind::Mapped));
      const int me = g.first + d;
      expectedPayload(g.worlds[d], 600 + round, me, nextRank(g, d), mine[d].data(), bytes);
      expectedPayload(g.worlds[d], 600 + round, prevRank(g, d), me, theirs[d].data(), bytes);
      std::vector<uint8_t> init(bytes + shift, 0xa5);
      std::copy(mine[d].begin(), mine[d].end(), init.begin());
      bufs[d]->upload(init.data(), init.size());
      uploadsDone();
    }
    setDevice(g.caller);
    EXPECT_OK(ncclGroupStart());
    for (int d = 0; d < n; ++d) {
      auto* p = static_cast<uint8_t*>(bufs[d]->data());
      EXPECT_OK(ncclSend(p, bytes, ncclInt8, nextRank(g, d), g.comms[d], g.streams[d]));
      EXPECT_OK(ncclRecv(p + shift, bytes, ncclInt8, prevRank(g, d), g.comms[d], g.streams[d]));
    }
    EXPECT_OK(ncclGroupEnd());
    expectCaller(g, "an in-place group");
    syncAll(g);
    for (int d = 0; d < n; ++d) {
      setDevice(d);
      std::vector<uint8_t> got(bytes + shift);
      bufs[d]->download(got.data(), got.size());
      size_t bad = SIZE_MAX;
      for (size_t i = 0; i < got.size() && bad == SIZE_MAX; ++i) {
        if (got[i] != (i < shift ? mine[d][i] : theirs[d][i - shift])) bad = i;
      }
      EXPECT_TRUE(bad == SIZE_MAX,
                  "in place: rank %d, round %llu (%zu bytes, shift %zu): "
                  "byte %zu wrong",
                  g.first + d, static_cast<unsigned long long>(round), bytes, shift, bad);
    }
    setDevice(g.caller);
  }
}

// Under ferry-run: this process's communicators, one per device, made in one
// group (ncclGetUniqueId names NCCL_COMM_ID's root on every process).
void initProcessRanks(Devices& g, const LaunchEnv& env) {
  g.nranks = env.nranks * g.n;
  g.first = env.rank * g.n;
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  EXPECT_OK(ncclGroupStart());
  for (int d = 0; d < g.n; ++d) {
    setDevice(d);
    EXPECT_OK(ncclCommInitRank(&g.comms[d], g.nranks, id, g.first + d));
  }
  setDevice(g.caller);
  EXPECT_OK(ncclGroupEnd());
}

// One seed for every rank: the largest of their own, by an all-reduce over
// every communicator of the process in one group (a blocking bootstrap
// all-gather per communicator would wait for this thread's next call).
uint64_t agreeSeed(Devices& g, uint64_t mine) {
  std::vector<std::unique_ptr<TestBuffer>> bufs;
  for (int d = 0; d < g.n; ++d) {
    setDevice(d);
    bufs.push_back(std::make_unique<TestBuffer>(sizeof(uint64_t), BufferKind::Plain));
    bufs.back()->upload(&mine, sizeof(mine));
    uploadsDone();
  }
  setDevice(g.caller);
  EXPECT_OK(ncclGroupStart());
  for (int d = 0; d < g.n; ++d) {
    EXPECT_OK(ncclAllReduce(bufs[d]->data(), bufs[d]->data(), 1, ncclUint64, ncclMax, g.comms[d],
                            g.streams[d]));
  }
  EXPECT_OK(ncclGroupEnd());
  syncAll(g);
  uint64_t agreed = 0;
  setDevice(0);
  bufs[0]->download(&agreed, sizeof(agreed));
  setDevice(g.caller);
  return agreed;
}

// One thread per device, each driving only its own communicator, all at
// once (the thread-per-GPU pattern NCCL allows: a communicator is used by
// one thread at a time, groups are per thread): rounds of an all-reduce and
// a ring exchange of random size (every path) in a group of its own.
void caseThreads(Devices& g, Rng& rng) {
  const uint64_t base = rng.next();  // the same on every process
  auto run = [&g, base](int d) {
    setDevice(d);
    Rng mine(base, 100 + static_cast<uint64_t>(g.first + d));
    Rng shared(base, 99);  // the same sizes on every thread and process
    for (uint64_t round = 0; round < 10; ++round) {
      CollSpec spec = randomSpec(shared, g.nranks, 9000, 2000 + round);
      spec.coll = Coll::AllReduce;
      const size_t bytes = randomBytes(shared);
      CollRun coll(g.worlds[d], spec);
      coll.prepare(g.comms[d]);
      const int me = g.first + d;
      Message out(g.worlds[d], 700 + round, me, nextRank(g, d), bytes,
                  mine.below(2) ? BufferKind::Mapped : BufferKind::Plain);
      Message in(g.worlds[d], 700 + round, prevRank(g, d), me, bytes, BufferKind::Plain);
      out.fillAsSender();
      in.poison();
      uploadsDone();
      coll.post(g.comms[d], g.streams[d]);
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(
          ncclSend(out.buf.data(), bytes, ncclInt8, nextRank(g, d), g.comms[d], g.streams2[d]));
      EXPECT_OK(
          ncclRecv(in.buf.data(), bytes, ncclInt8, prevRank(g, d), g.comms[d], g.streams2[d]));
      EXPECT_OK(ncclGroupEnd());
      coll.releaseOp(g.comms[d]);
      EXPECT_OK(ncclFerryStreamSynchronize(g.streams[d]));
      EXPECT_OK(ncclFerryStreamSynchronize(g.streams2[d]));
      coll.verify();
      in.verify("thread per device ring");
    }
  };
  std::vector<std::thread> threads;
  for (int d = 0; d < g.n; ++d) threads.emplace_back(run, d);
  for (auto& t : threads) t.join();
  setDevice(g.caller);
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<void(Devices&, Rng&)>> cases = {
      {"coll", caseColl},
      {"p2p", caseP2p},
      {"mixed", caseMixed},
      {"nogroup", caseNoGroup},
      {"inplace", caseInPlaceRings},
      {"threads", caseThreads}};
  if (argc < 2 || cases.count(argv[1]) == 0) {
    fprintf(stderr, "usage: %s <coll|p2p|mixed|nogroup|inplace|threads> [ndev]\n", argv[0]);
    return 2;
  }
  Devices g;
  int count = 0;
  EXPECT_OK(ncclFerryGetDeviceCount(&count));
  g.n = argc > 2 ? atoi(argv[2]) : std::min(count, 4);
  const bool launched = getenv("FERRY_NRANKS") != nullptr;  // by ferry-run: P processes
  const LaunchEnv env = launched ? launchEnv() : LaunchEnv{};
  // ferry-run's LOCAL_RANK counts every rank of the machine, emulated hosts
  // or not: the base wraps over the devices, which hosts may share.
  if (launched && count > 0) gDeviceBase = env.rank * g.n % count;
  if (g.n < 2 || gDeviceBase + g.n > count) {
    printf("SKIPPED: needs %d devices, found %d\n", gDeviceBase + g.n, count);
    return 77;
  }
  uint64_t seed = testSeed();
  g.caller = g.n - 1;
  setDevice(g.caller);
  g.comms.resize(g.n);
  if (launched) {
    initProcessRanks(g, env);
    expectCaller(g, "a group of ncclCommInitRank");
  } else {
    g.nranks = g.n;
    EXPECT_OK(ncclCommInitAll(g.comms.data(), g.n, nullptr));
    expectCaller(g, "ncclCommInitAll");
  }
  g.streams.resize(g.n);
  g.streams2.resize(g.n);
  for (int d = 0; d < g.n; ++d) {
    setDevice(d);
    EXPECT_OK(ncclFerryStreamCreate(&g.streams[d]));
    EXPECT_OK(ncclFerryStreamCreate(&g.streams2[d]));
  }
  setDevice(g.caller);
  if (launched && gFailures == 0) seed = agreeSeed(g, seed);
  printf("seed=%llu devices=%d ranks %d..%d of %d\n", static_cast<unsigned long long>(seed), g.n,
         g.first, g.first + g.n - 1, g.nranks);
  for (int d = 0; d < g.n; ++d) {
    g.worlds.push_back(World{g.comms[d], g.streams[d], g.first + d, g.nranks, seed});
  }
  if (gFailures == 0) {
    Rng rng(seed, 11);
    cases.at(argv[1])(g, rng);
  }
  for (int d = 0; d < g.n; ++d) {
    EXPECT_OK(ncclCommDestroy(g.comms[d]));
    expectCaller(g, "ncclCommDestroy");
  }
  for (int d = 0; d < g.n; ++d) {
    EXPECT_OK(ncclFerryStreamDestroy(g.streams[d]));
    EXPECT_OK(ncclFerryStreamDestroy(g.streams2[d]));
  }
  printf("%s %s: %d failure(s)\n", gFailures == 0 ? "PASS" : "FAIL", argv[1], gFailures.load());
  return gFailures == 0 ? 0 : 1;
}
