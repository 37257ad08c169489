// Network connections at init across emulated hosts, under ferry-run on the
// host runtime: every rank sets NCCL_HOSTID from its rank (kRanksPerHost
// ranks per "host") before it creates its communicator, so ranks of one
// machine see each other as peers on other hosts, connect through the
// network engine (src/transport/net_setup.h) and move data over it.
//
// Which connections were made is read back from the rank's own INFO log
// (NCCL_DEBUG_FILE, one file per process), whose lines
// "connection A -> B via <transport>" are what users see too.
//
// Usage: ferry-run -n N mp_net <connect|initdestroy|bogus|plugin|mismatch|gdr>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "common/proc.h"
#include "common/random.h"
#include "ferry.h"
#include "mp_check.h"
#include "nccl.h"
#include "p2p_util.h"

namespace {

using namespace ferry::test;

constexpr int kRanksPerHost = 2;
// Every case must finish well inside this on a loaded 2-core machine.
constexpr double kInitLimitS = 15.0;

int hostOf(int rank) {
  return rank / kRanksPerHost;
}

struct Ctx {
  LaunchEnv env;
  std::string logPath;  // this process's INFO log
};

// The environment every case starts from: this rank's emulated host, and
// an INFO log of the INIT and NET subsystems in a file of its own. Set
// before the first library call: the logger reads them at its first line.
void prepare(Ctx& ctx) {
  const std::string host = "ferry-mp-net-host" + std::to_string(hostOf(ctx.env.rank));
  setenv("NCCL_HOSTID", host.c_str(), 1);
  ctx.logPath = "/tmp/ferry-mp-net." + std::to_string(getpid()) + ".log";
  unlink(ctx.logPath.c_str());
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
  setenv("NCCL_DEBUG_FILE", ctx.logPath.c_str(), 1);
  int ndev = 0;
  if (ncclFerryGetDeviceCount(&ndev) == ncclSuccess && ndev > 0) {
    const int dev = ctx.env.device >= 0 ? ctx.env.device : ctx.env.localRank;
    EXPECT_OK(ncclFerrySetDevice(dev % ndev));
  }
}

// Creates the world communicator; returns init's result and its duration.
ncclResult_t timedInit(const Ctx& ctx, ncclComm_t* comm, double* seconds) {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  auto start = Clock::now();
  ncclResult_t r = ncclCommInitRank(comm, ctx.env.nranks, id, ctx.env.rank);
  *seconds = secondsSince(start);
  printf("rank %d: init returned %s after %.2f s\n", ctx.env.rank, ncclGetErrorString(r), *seconds);
  return r;
}

// The text after "NCCL INFO " of every INFO line in the log.
std::vector<std::string> infoLines(const Ctx& ctx) {
  std::vector<std::string> out;
  std::ifstream in(ctx.logPath);
  const std::string tag = " NCCL INFO ";
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find(tag);
    if (at != std::string::npos) out.push_back(line.substr(at + tag.size()));
  }
  return out;
}

bool hasLine(const std::vector<std::string>& lines, const std::string& want) {
  for (const std::string& l : lines) {
    if (l == want) return true;
  }
  return false;
}

bool hasLineStarting(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const std::string& l : lines) {
    if (l.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

// Every connection of this rank is in its log: NET/<engine>/<device> in
// both directions to each rank of another host, P2P to each rank of this
// host. The device: (peer + local index) modulo the engine's devices
// (FERRY_TEST_NET_DEVICES of the test plugin; one otherwise).
void checkConnections(const Ctx& ctx, const std::string& engine) {
  const std::vector<std::string> lines = infoLines(ctx);
  const int me = ctx.env.rank;
  const char* devs = engine == "FerryTest" ? getenv("FERRY_TEST_NET_DEVICES") : nullptr;
  const int ndev = devs != nullptr && atoi(devs) > 0 ? atoi(devs) : 1;
  int local = 0;
  for (int r = 0; r < me; ++r) local += hostOf(r) == hostOf(me);
  EXPECT_TRUE(hasLineStarting(lines, "NET/" + engine + " : using "),
              "no \"NET/%s : using ...\" line in %s", engine.c_str(), ctx.logPath.c_str());
  int net = 0;
  for (int q = 0; q < ctx.env.nranks; ++q) {
    const std::string send = "connection " + std::to_string(me) + " -> " + std::to_string(q);
    if (hostOf(q) == hostOf(me)) {
      EXPECT_TRUE(hasLineStarting(lines, send + " via P2P"), "no \"%s via P2P\" line",
                  send.c_str());
      continue;
    }
    // FERRY_NET_GDR=1 with an engine that takes device memory: "/GDRDMA".
    const char* gdr = getenv("FERRY_NET_GDR");
    const char* cuda = getenv("FERRY_TEST_NET_PTR_CUDA");
    const bool direct = gdr != nullptr && strcmp(gdr, "1") == 0 && engine == "FerryTest" &&
                        cuda != nullptr && strcmp(cuda, "1") == 0;
    const std::string via = " via NET/" + engine + "/" + std::to_string((q + local) % ndev) +
                            (direct ? "/GDRDMA" : " (host-staged)");
    const std::string recv = "connection " + std::to_string(q) + " -> " + std::to_string(me);
    // FERRY_NET_LINKS > 1: the line names the links.
    const char* linksEnv = getenv("FERRY_NET_LINKS");
    const int links = linksEnv != nullptr ? atoi(linksEnv) : 1;
    const std::string striped = links > 1 ? " x" + std::to_string(links) + " links" : "";
    EXPECT_TRUE(hasLine(lines, send + via + striped), "no \"%s%s%s\" line", send.c_str(),
                via.c_str(), striped.c_str());
    EXPECT_TRUE(hasLine(lines, recv + via + " [receive]" + striped), "no \"%s%s [receive]%s\" line",
                recv.c_str(), via.c_str(), striped.c_str());
    ++net;
  }
  printf("rank %d: %d peer(s) on other hosts connected via NET/%s\n", me, net, engine.c_str());
}

// Megabytes that the lanes of the closed socket comms of one direction
// reported in their INFO lines ("... closed; lanes [0: 1.5 MB, ...]").
double helperMegabytes(const std::vector<std::string>& lines, const std::string& direction) {
  const std::string head = "net/socket: " + direction + " comm with ";
  double total = 0;
  for (const std::string& l : lines) {
    if (l.compare(0, head.size(), head) != 0 || l.find("closed; lanes") == std::string::npos) {
      continue;
    }
    for (size_t at = l.find(" ["); at != std::string::npos; at = l.find(" [", at + 1)) {
      const size_t colon = l.find(": ", at);
      if (colon != std::string::npos) total += atof(l.c_str() + colon + 2);
    }
  }
  return total;
}

// Milliseconds of CPU the shared helpers reported once every comm had let
// go of them ("shared helpers idle (...); [0: cpu 1.2/3.4 ms, ...] ..."),
// summed over such lines; -1 when there is none.
double sharedHelperCpuMs(const std::vector<std::string>& lines) {
  const std::string head = "net/socket: shared helpers idle";
  double total = -1;
  for (const std::string& l : lines) {
    if (l.compare(0, head.size(), head) != 0) continue;
    total = std::max(total, 0.0);
    for (size_t at = l.find(": cpu "); at != std::string::npos; at = l.find(": cpu ", at + 1)) {
      total += atof(l.c_str() + at + 6);
    }
  }
  return total;
}

// The cross-host rounds moved megabytes through helper threads both ways,
// so the comms closed at destroy report them per lane
// (socket_net_internal.h's LaneStats), and the engine's shared helpers
// (the default) their CPU time once the last comm let go of them.
void checkHelperStats(const Ctx& ctx) {
  const std::vector<std::string> lines = infoLines(ctx);
  const double sent = helperMegabytes(lines, "send");
  const double received = helperMegabytes(lines, "receive");
  EXPECT_TRUE(sent > 0.5, "helpers of send comms reported %.2f MB (%s)", sent, ctx.logPath.c_str());
  EXPECT_TRUE(received > 0.5, "helpers of receive comms reported %.2f MB (%s)", received,
              ctx.logPath.c_str());
  const char* shared = getenv("FERRY_NET_SHARED_HELPERS");
  if (shared != nullptr && atoi(shared) == 0) return;
  const double cpuMs = sharedHelperCpuMs(lines);
  EXPECT_TRUE(cpuMs > 0, "shared helpers reported %.3f ms of CPU (-1: no line) (%s)", cpuMs,
              ctx.logPath.c_str());
  // The engine counted the processes of this (emulated) host's ranks (one
  // each here) as sharing its CPUs.
  int onHost = 0;
  for (int r = 0; r < ctx.env.nranks; ++r) onHost += hostOf(r) == hostOf(ctx.env.rank);
  const std::string want = ", " + std::to_string(onHost) + " process(es) on this host)";
  bool found = false;
  for (const std::string& l : lines) found |= l.find(want) != std::string::npos;
  EXPECT_TRUE(found, "no engine line with \"%s\" (%s)", want.c_str(), ctx.logPath.c_str());
}

World makeWorld(const Ctx& ctx, ncclComm_t comm) {
  World w;
  w.comm = comm;
  w.rank = ctx.env.rank;
  w.nranks = ctx.env.nranks;
  std::vector<uint64_t> seeds(w.nranks, 0);
  seeds[w.rank] = testSeed();
  EXPECT_OK(ncclFerryBootstrapAllGather(w.comm, seeds.data(), sizeof(uint64_t)));
  w.seed = seeds[0];
  EXPECT_OK(ncclFerryStreamCreate(&w.stream));
  return w;
}

// One exchange with every peer on this host (self included): fresh random
// payloads of random sizes (small ones, which a one-host communicator
// would send with kernel p2p, and large ones), poisoned receive buffers,
// every byte compared.
void sameHostRound(World& w, uint64_t round) {
  std::vector<std::unique_ptr<Message>> out, in;
  EXPECT_OK(ncclGroupStart());
  for (int p = 0; p < w.nranks; ++p) {
    if (hostOf(p) != hostOf(w.rank)) continue;
    const uint64_t lo = static_cast<uint64_t>(std::min(w.rank, p));
    const uint64_t hi = static_cast<uint64_t>(std::max(w.rank, p));
    Rng pick(w.seed ^ (round * 0x9E3779B97F4A7C15ULL), lo * 64 + hi);
    const size_t bytes =
        round % 2 == 0 ? 1 + pick.below(64 << 10) : (1 << 20) + pick.below(3 << 20);
    const BufferKind kind = round % 3 == 0 ? BufferKind::Mapped : BufferKind::Plain;
    out.push_back(std::make_unique<Message>(w, round, w.rank, p, bytes, kind));
    in.push_back(std::make_unique<Message>(w, round, p, w.rank, bytes, kind));
    out.back()->fillAsSender();
    in.back()->poison();
    EXPECT_OK(ncclSend(out.back()->buf.data(), bytes, ncclInt8, p, w.comm, w.stream));
    EXPECT_OK(ncclRecv(in.back()->buf.data(), bytes, ncclInt8, p, w.comm, w.stream));
  }
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  for (auto& m : in) m->verify("same-host exchange");
}

// One group with every peer, on this host and on the others: fresh random
// payloads of random sizes (0 bytes, small, several network chunks),
// poisoned receive buffers, every byte compared; then ncclAlltoAll across
// the hosts, checked the same way. The per-peer counters count the
// network messages like any other.
void crossHostRound(World& w, uint64_t round) {
  std::vector<std::unique_ptr<Message>> out, in;
  ncclFerryPeerStats_t before{};
  const int remote = (w.rank + kRanksPerHost) % w.nranks;
  EXPECT_OK(ncclFerryCommPeerStats(w.comm, remote, &before));
  EXPECT_OK(ncclGroupStart());
  for (int p = 0; p < w.nranks; ++p) {
    auto size = [&](int from, int to) -> size_t {
      Rng pick(w.seed ^ (round * 0x9E3779B97F4A7C15ULL), static_cast<uint64_t>(from * 64 + to));
      switch (pick.below(4)) {
        case 0:
          return pick.below(3);  // 0..2 bytes
        case 1:
          return 1 + pick.below(64 << 10);
        default:
          return (1 << 20) + pick.below(5 << 20);  // several 1 MiB chunks
      }
    };
    out.push_back(
        std::make_unique<Message>(w, round, w.rank, p, size(w.rank, p), BufferKind::Plain));
    in.push_back(
        std::make_unique<Message>(w, round, p, w.rank, size(p, w.rank), BufferKind::Plain));
    out.back()->fillAsSender();
    in.back()->poison();
    EXPECT_OK(ncclSend(out.back()->buf.data(), out.back()->bytes, ncclInt8, p, w.comm, w.stream));
    EXPECT_OK(ncclRecv(in.back()->buf.data(), in.back()->bytes, ncclInt8, p, w.comm, w.stream));
  }
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  for (auto& m : in) m->verify("cross-host exchange");
  ncclFerryPeerStats_t after{};
  EXPECT_OK(ncclFerryCommPeerStats(w.comm, remote, &after));
  EXPECT_TRUE(after.sendOps == before.sendOps + 1 && after.recvOps == before.recvOps + 1,
              "peer %d: counters moved by %llu sends, %llu receives (1 each expected)", remote,
              after.sendOps - before.sendOps, after.recvOps - before.recvOps);
  ncclResult_t async = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(w.comm, &async));
  EXPECT_TRUE(async == ncclSuccess, "communicator in error state %d", async);
}

void crossHostAlltoAll(World& w, uint64_t round) {
  const size_t block = (3 << 20) + 5;  // several chunks, an odd tail
  TestBuffer send(block * w.nranks, BufferKind::Plain), recv(block * w.nranks, BufferKind::Plain);
  for (int p = 0; p < w.nranks; ++p) {
    expectedPayload(w, round, w.rank, p, static_cast<char*>(send.data()) + p * block, block);
  }
  memset(recv.data(), 0xA5, block * w.nranks);
  EXPECT_OK(ncclAlltoAll(send.data(), recv.data(), block, ncclInt8, w.comm, w.stream));
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  std::vector<char> want(block);
  for (int p = 0; p < w.nranks; ++p) {
    expectedPayload(w, round, p, w.rank, want.data(), block);
    const char* got = static_cast<const char*>(recv.data()) + p * block;
    EXPECT_TRUE(memcmp(got, want.data(), block) == 0, "alltoall: block from %d differs", p);
  }
}

// (a) Connections across hosts are NET, and data moves over them and over
// the same-host ones in one group; destroy is clean.
void caseConnect(Ctx& ctx) {
  ncclComm_t comm = nullptr;
  double s = 0;
  EXPECT_OK(timedInit(ctx, &comm, &s));
  if (gFailures > 0) return;
  EXPECT_TRUE(s < kInitLimitS, "init took %.2f s", s);
  checkConnections(ctx, "Socket");
  World w = makeWorld(ctx, comm);
  for (uint64_t round = 0; round < 6; ++round) sameHostRound(w, round);
  for (uint64_t round = 10; round < 16; ++round) crossHostRound(w, round);
  crossHostAlltoAll(w, 20);
  // A second communicator over the same ranks shares the process's engine
  // (its connections come and go while the first one's stay up).
  World split = w.split();
  if (split.comm != nullptr) {
    sameHostRound(split, 100);
    split.destroy();
  }
  for (uint64_t round = 6; round < 9; ++round) sameHostRound(w, round);
  auto start = Clock::now();
  w.destroy();
  EXPECT_TRUE(secondsSince(start) < 10.0, "destroy took %.2f s", secondsSince(start));
  EXPECT_OK(ncclFerryStreamDestroy(w.stream));
  checkHelperStats(ctx);
}

// (b) Init and destroy only (more hosts, more connections per rank).
void caseInitDestroy(Ctx& ctx) {
  ncclComm_t comm = nullptr;
  double s = 0;
  EXPECT_OK(timedInit(ctx, &comm, &s));
  if (gFailures > 0) return;
  EXPECT_TRUE(s < kInitLimitS, "init took %.2f s", s);
  checkConnections(ctx, "Socket");
  auto start = Clock::now();
  EXPECT_OK(ncclCommDestroy(comm));
  EXPECT_TRUE(secondsSince(start) < 10.0, "destroy took %.2f s", secondsSince(start));
}

// Init with `name`=`value` in the environment: every rank's init fails at
// once (none waits for the others in the bootstrap) with ncclInvalidArgument
// and a last error that contains each of `want`.
void expectInitRefused(Ctx& ctx, const char* name, const char* value,
                       const std::vector<std::string>& want) {
  setenv(name, value, 1);
  ncclComm_t comm = nullptr;
  double s = 0;
  ncclResult_t r = timedInit(ctx, &comm, &s);
  const std::string why = ncclGetLastError(nullptr);
  printf("rank %d: %s\n", ctx.env.rank, why.c_str());
  EXPECT_TRUE(r == ncclInvalidArgument, "init returned %d (%s)", r, ncclGetErrorString(r));
  for (const std::string& w : want) {
    EXPECT_TRUE(why.find(w) != std::string::npos, "last error does not name \"%s\": %s", w.c_str(),
                why.c_str());
  }
  EXPECT_TRUE(s < kInitLimitS, "failing init took %.2f s", s);
  if (comm != nullptr) EXPECT_OK(ncclCommAbort(comm));
}

// (c) NCCL_NET naming no engine fails init on every rank, promptly; the
// error names it and the Socket engine.
void caseBogus(Ctx& ctx) {
  expectInitRefused(ctx, "NCCL_NET", "Bogus", {"NCCL_NET=Bogus", "Socket"});
}

// FERRY_NET_LINKS out of range.
void caseBadLinks(Ctx& ctx) {
  expectInitRefused(ctx, "FERRY_NET_LINKS", "9", {"FERRY_NET_LINKS=9"});
}

// Waits up to `seconds` for the communicator's async error to be set.
ncclResult_t awaitAsyncError(ncclComm_t comm, double seconds) {
  ncclResult_t state = ncclSuccess;
  auto start = Clock::now();
  while (state == ncclSuccess && secondsSince(start) < seconds) {
    EXPECT_OK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) usleep(10000);
  }
  return state;
}

// (e) A send whose receive (on another host) has another size: the
// receiver fails with ncclInvalidUsage naming both sizes, its closed
// connection fails the sender's next message with ncclRemoteError, and
// nothing hangs; the other ranks' exchange is unaffected. Ranks 0 -> 2
// mismatch; 1 <-> 3 exchange correctly.
void caseMismatch(Ctx& ctx) {
  ncclComm_t comm = nullptr;
  double s = 0;
  EXPECT_OK(timedInit(ctx, &comm, &s));
  if (gFailures > 0) return;
  World w = makeWorld(ctx, comm);
  const int me = w.rank;
  if (me == 1 || me == 3) {
    const int peer = 4 - me;
    Message out(w, 30, me, peer, (5 << 20) + 7, BufferKind::Plain);
    Message in(w, 30, peer, me, (5 << 20) + 7, BufferKind::Plain);
    out.fillAsSender();
    in.poison();
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(out.buf.data(), out.bytes, ncclInt8, peer, w.comm, w.stream));
    EXPECT_OK(ncclRecv(in.buf.data(), in.bytes, ncclInt8, peer, w.comm, w.stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    in.verify("exchange beside a mismatch");
    ncclResult_t async = ncclInternalError;
    EXPECT_OK(ncclCommGetAsyncError(w.comm, &async));
    EXPECT_TRUE(async == ncclSuccess, "rank %d: async error %d", me, async);
  } else if (me == 0) {
    Message out(w, 31, 0, 2, (3 << 20) + 1, BufferKind::Plain);
    out.fillAsSender();
    EXPECT_OK(ncclSend(out.buf.data(), out.bytes, ncclInt8, 2, w.comm, w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    // The receiver has closed the connection by the time this one goes.
    ncclResult_t state = ncclSuccess;
    for (int i = 0; i < 200 && state == ncclSuccess; ++i) {
      usleep(20000);
      // Refused once the communicator knows; that is the point.
      (void)ncclSend(out.buf.data(), 4096, ncclInt8, 2, w.comm, w.stream);
      EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
      EXPECT_OK(ncclCommGetAsyncError(w.comm, &state));
    }
    printf("rank 0: sender's async error: %s\n", ncclGetErrorString(state));
    EXPECT_TRUE(state == ncclRemoteError, "sender's async error %d", state);
  } else {
    Message in(w, 31, 0, 2, (2 << 20) + 1, BufferKind::Plain);
    in.poison();
    EXPECT_OK(ncclRecv(in.buf.data(), in.bytes, ncclInt8, 0, w.comm, w.stream));
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    const ncclResult_t state = awaitAsyncError(w.comm, 20);
    const std::string why = ncclGetLastError(w.comm);
    printf("rank 2: receiver's async error: %s (%s)\n", ncclGetErrorString(state), why.c_str());
    EXPECT_TRUE(state == ncclInvalidUsage, "receiver's async error %d", state);
    EXPECT_TRUE(
        why.find("2097153") != std::string::npos && why.find("does not match") != std::string::npos,
        "the last error does not explain the mismatch: %s", why.c_str());
  }
  EXPECT_OK(ncclCommAbort(w.comm));
  EXPECT_OK(ncclFerryStreamDestroy(w.stream));
}

using CounterFn = long long (*)(const char*);

// The collective ring's hops across hosts at this rank (coll/ring_net.h):
// the ring visits hosts in order of their first rank; each remote
// neighbour costs one engine connection per channel (2 on the host runtime
// when a communicator spans hosts).
struct RingHops {
  long long listens = 0;  // from a remote previous rank
  long long sends = 0;    // to a remote next rank
};
RingHops ringHopsOf(const Ctx& ctx) {
  const int n = ctx.env.nranks;
  std::vector<int> hosts, ring;
  for (int r = 0; r < n; ++r) {
    if (std::find(hosts.begin(), hosts.end(), hostOf(r)) == hosts.end()) hosts.push_back(hostOf(r));
  }
  for (int h : hosts) {
    for (int r = 0; r < n; ++r) {
      if (hostOf(r) == h) ring.push_back(r);
    }
  }
  const int pos =
      static_cast<int>(std::find(ring.begin(), ring.end(), ctx.env.rank) - ring.begin());
  const int prev = ring[(pos + n - 1) % n], next = ring[(pos + 1) % n];
  const long long channels = 2;
  RingHops h;
  h.listens = hostOf(prev) != hostOf(ctx.env.rank) ? channels : 0;
  h.sends = hostOf(next) != hostOf(ctx.env.rank) ? channels : 0;
  return h;
}

// An all-reduce (sum of int32 values of every rank, exact) checked
// element-wise: the first collective, which sets up the ring's hops.
void checkAllReduce(const World& w, uint64_t round, size_t n = 70001) {
  auto value = [&](int rank, size_t i) {
    return static_cast<int32_t>((w.seed ^ (round * 0x9E3779B97F4A7C15ULL)) % 9973 + i * 7 +
                                rank * 131) %
           100000;
  };
  std::vector<int32_t> in(n), out(n, -1);
  for (size_t i = 0; i < n; ++i) in[i] = value(w.rank, i);
  TestBuffer src(n * 4, BufferKind::Plain), dst(n * 4, BufferKind::Plain);
  src.upload(in.data(), n * 4);
  dst.upload(out.data(), n * 4);  // poison
  EXPECT_OK(ncclAllReduce(src.data(), dst.data(), n, ncclInt32, ncclSum, w.comm, w.stream));
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  dst.download(out.data(), n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t want = 0;
    for (int r = 0; r < w.nranks; ++r) want += value(r, i);
    if (out[i] != want && bad++ < 3) {
      EXPECT_TRUE(false, "all-reduce element %zu is %d, expected %d", i, out[i], want);
    }
  }
}

// (d) The connections go through the net plugin NCCL_NET_PLUGIN names: its
// own call counters show every listen, connect and accept.
// Init with the test plugin as the network engine, its connections
// checked: the plugin's call counters (null, a failure recorded, when
// something went wrong); *lib is the library Ferry loaded.
CounterFn initOnTestPlugin(Ctx& ctx, ncclComm_t* comm, void** lib) {
  const char* path = FERRY_TEST_NET_PLUGIN_V11;
  setenv("NCCL_NET_PLUGIN", path, 1);
  setenv("NCCL_NET", "ferrytest", 1);
  double s = 0;
  EXPECT_OK(timedInit(ctx, comm, &s));
  if (gFailures > 0) return nullptr;
  EXPECT_TRUE(s < kInitLimitS, "init took %.2f s", s);
  checkConnections(ctx, "FerryTest");
  // The library Ferry loaded, not a second copy.
  *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_TRUE(*lib != nullptr, "%s is not loaded: %s", path, dlerror());
  if (*lib == nullptr) return nullptr;
  auto counter = reinterpret_cast<CounterFn>(dlsym(*lib, "ferryTestNetCounters"));
  EXPECT_TRUE(counter != nullptr, "no ferryTestNetCounters in %s", path);
  return counter;
}

// Kernel p2p's lanes per remote peer made at init: 2 (a send and a receive
// connection each) on communicators of up to 8 ranks by default, on any with
// FERRY_P2P_KERNEL_ACROSS_HOSTS=1 or NCCL_PASS_SM=0, none with =0.
long long kernelLanesPerPeer(int nranks) {
  const char* v = getenv("FERRY_P2P_KERNEL_ACROSS_HOSTS");
  const char* passSm = getenv("NCCL_PASS_SM");
  const std::string knob = v != nullptr ? v : "-1";
  const bool made = (passSm != nullptr && std::string(passSm) == "0") || knob == "1" ||
                    (knob == "-1" && nranks <= 8);
  return made ? 2 : 0;
}

void casePlugin(Ctx& ctx) {
  ncclComm_t comm = nullptr;
  void* lib = nullptr;
  const CounterFn counter = initOnTestPlugin(ctx, &comm, &lib);
  if (counter == nullptr) return;
  long long remote = 0;
  for (int q = 0; q < ctx.env.nranks; ++q) remote += hostOf(q) != hostOf(ctx.env.rank);
  // Connections each way at init: point-to-point's, then kernel p2p's lanes.
  const long long conns = remote * (1 + kernelLanesPerPeer(ctx.env.nranks));
  printf("rank %d: plugin calls: listen %lld connect %lld accept %lld closeListen %lld\n",
         ctx.env.rank, counter("listen"), counter("connect"), counter("accept"),
         counter("closeListen"));
  // Init connects point-to-point (and kernel p2p's lanes) only: the ring's
  // hops come with the first collective (NCCL_RUNTIME_CONNECT=1).
  EXPECT_TRUE(counter("listen") == conns && counter("connect") >= conns &&
                  counter("accept") >= conns && counter("closeListen") == conns,
              "after init: listen %lld connect %lld accept %lld closeListen %lld, %lld expected",
              counter("listen"), counter("connect"), counter("accept"), counter("closeListen"),
              conns);
  World w = makeWorld(ctx, comm);
  checkAllReduce(w, 7);
  const RingHops hops = ringHopsOf(ctx);
  EXPECT_TRUE(counter("listen") == conns + hops.listens, "listen called %lld times, %lld expected",
              counter("listen"), conns + hops.listens);
  EXPECT_TRUE(counter("connect") >= conns + hops.sends, "connect called %lld times",
              counter("connect"));
  EXPECT_TRUE(counter("accept") >= conns + hops.listens, "accept called %lld times",
              counter("accept"));
  EXPECT_TRUE(counter("closeListen") == conns + hops.listens, "closeListen called %lld times",
              counter("closeListen"));
  // FERRY_TEST_NET_DEVICES=N: the plugin reports N NICs, and the ring's
  // channels and the peers' connections must spread over all of them.
  const char* devs = getenv("FERRY_TEST_NET_DEVICES");
  const int ndev = devs != nullptr ? atoi(devs) : 1;
  for (int d = 0; ndev > 1 && d < ndev; ++d) {
    const std::string l = "listen@" + std::to_string(d), c = "connect@" + std::to_string(d);
    printf("rank %d: device %d: %lld listens, %lld connections\n", ctx.env.rank, d,
           counter(l.c_str()), counter(c.c_str()));
    EXPECT_TRUE(counter(l.c_str()) > 0 && counter(c.c_str()) > 0,
                "device %d of %d: %lld listens, %lld connections (every NIC must carry some)", d,
                ndev, counter(l.c_str()), counter(c.c_str()));
  }
  // A ring hop ships the bytes its kernel put in a slot, not whole slots:
  // small all-reduces move about their size across hosts.
  // The barriers: a sender's kernel may finish before the proxy isent its
  // last slots, but not before the receivers got them (trap 31).
  EXPECT_OK(ncclFerryBootstrapBarrier(comm));
  const long long before = counter("isendBytes");
  constexpr size_t kSmall = 1000;  // int32s
  constexpr int kSmallOps = 5;
  for (int i = 0; i < kSmallOps; ++i) checkAllReduce(w, 10 + i, kSmall);
  EXPECT_OK(ncclFerryBootstrapBarrier(comm));
  const long long moved = counter("isendBytes") - before;
  printf("rank %d: %d all-reduces of %zu bytes sent %lld bytes through the plugin\n", ctx.env.rank,
         kSmallOps, kSmall * 4, moved);
  // A rank sends at most 2 (nranks - 1) / nranks of the message per op.
  EXPECT_TRUE(moved <= static_cast<long long>(kSmallOps * kSmall * 4 * 2),
              "%d all-reduces of %zu bytes sent %lld bytes across hosts (whole slots?)", kSmallOps,
              kSmall * 4, moved);
  sameHostRound(w, 1);
  const long long sends = counter("isend"), recvs = counter("irecv");
  crossHostRound(w, 2);
  printf("rank %d: plugin isend %lld irecv %lld test %lld regMr %lld\n", ctx.env.rank,
         counter("isend"), counter("irecv"), counter("test"), counter("regMr"));
  EXPECT_TRUE(counter("isend") > sends && counter("irecv") > recvs,
              "the plugin carried nothing: isend %lld -> %lld, irecv %lld -> %lld", sends,
              counter("isend"), recvs, counter("irecv"));
  EXPECT_TRUE(counter("regMr") > 0, "no memory registered with the plugin");
  // FERRY_NET_GDR is off by default: no device memory reaches the plugin.
  EXPECT_TRUE(counter("regMrCuda") == 0 && counter("isendCuda") == 0,
              "device memory registered (%lld) or sent from (%lld) without FERRY_NET_GDR",
              counter("regMrCuda"), counter("isendCuda"));
  w.destroy();
  EXPECT_OK(ncclFerryStreamDestroy(w.stream));
  EXPECT_TRUE(
      counter("closeSend") == conns + hops.sends && counter("closeRecv") == conns + hops.listens,
      "after destroy: closeSend %lld closeRecv %lld, %lld and %lld expected", counter("closeSend"),
      counter("closeRecv"), conns + hops.sends, conns + hops.listens);
  dlclose(lib);
}

// FERRY_NET_GDR=1 with an engine that takes device memory (the test plugin
// with FERRY_TEST_NET_PTR_CUDA=1; on the host runtime device memory is plain
// memory): messages of more than one chunk (FERRY_NET_CHUNK_BYTES=16K here)
// go between the users' buffers (ncclMemAlloc) and the plugin directly,
// and the plugin checks that each request lies inside its registration.
// The plugin keeps what it received into device memory scrambled until an
// iflush on that comm, so a receive read before its flush fails the check.
// Three rounds of exchanges with every rank, sizes from 0 bytes to several
// chunks, on the same buffers: each buffer is registered once per link,
// however many rounds use it. Every byte is checked, and the byte after
// each receive must stay untouched.
void caseGdr(Ctx& ctx) {
  ncclComm_t comm = nullptr;
  void* lib = nullptr;
  const CounterFn counter = initOnTestPlugin(ctx, &comm, &lib);
  if (counter == nullptr) return;
  World w = makeWorld(ctx, comm);
  constexpr size_t kCap = (640 << 10) + 3;
  std::vector<std::unique_ptr<TestBuffer>> out, in;
  for (int p = 0; p < w.nranks; ++p) {
    out.push_back(std::make_unique<TestBuffer>(kCap, BufferKind::Mapped));
    in.push_back(std::make_unique<TestBuffer>(kCap, BufferKind::Mapped));
  }
  long long regsAfterFirst = 0;
  std::vector<char> host(kCap), want(kCap);
  for (uint64_t round = 0; round < 3; ++round) {
    // Round 0's messages across hosts span several chunks, so each rank's
    // first round registers (regsAfterFirst); later rounds draw any size (a
    // seed once gave rank 0 only 0-2 byte messages across hosts in round 0).
    auto size = [&](int from, int to) -> size_t {
      Rng pick(w.seed ^ (round * 0x9E3779B97F4A7C15ULL), static_cast<uint64_t>(from * 64 + to));
      if (round == 0 && hostOf(from) != hostOf(to)) return kCap / 2 + pick.below(kCap / 2);
      return pick.below(4) == 0 ? pick.below(3) : 1 + pick.below(kCap);
    };
    EXPECT_OK(ncclGroupStart());
    for (int p = 0; p < w.nranks; ++p) {
      expectedPayload(w, 300 + round, w.rank, p, host.data(), size(w.rank, p));
      out[p]->upload(host.data(), size(w.rank, p));
      memset(host.data(), 0x5A, kCap);
      in[p]->upload(host.data(), kCap);
      EXPECT_OK(ncclSend(out[p]->data(), size(w.rank, p), ncclInt8, p, w.comm, w.stream));
      EXPECT_OK(ncclRecv(in[p]->data(), size(p, w.rank), ncclInt8, p, w.comm, w.stream));
    }
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    for (int p = 0; p < w.nranks; ++p) {
      const size_t n = size(p, w.rank);
      in[p]->download(host.data(), kCap);
      expectedPayload(w, 300 + round, p, w.rank, want.data(), n);
      EXPECT_TRUE(memcmp(host.data(), want.data(), n) == 0, "round %llu: %zu bytes from %d differ",
                  static_cast<unsigned long long>(round), n, p);
      EXPECT_TRUE(n == kCap || static_cast<unsigned char>(host[n]) == 0x5A,
                  "round %llu: the receive from %d wrote past its %zu bytes",
                  static_cast<unsigned long long>(round), p, n);
    }
    if (round == 0) regsAfterFirst = counter("regMrCuda");
  }
  // A direct send's buffer belongs to the user again once the send is done
  // on its stream: a self copy queued right behind it overwrites it, and
  // the partner must still get the bytes from before. One side sends while
  // the other only receives, then the other way round.
  const int partner = (w.rank + kRanksPerHost) % w.nranks;
  constexpr size_t kOver = (600 << 10) + 1;
  static_assert(kOver <= kCap, "the overwrite fits the buffers");
  TestBuffer later(kOver, BufferKind::Mapped);
  for (int phase = 0; phase < 2; ++phase) {
    const bool sends = (hostOf(w.rank) == 0) == (phase == 0);
    if (sends) {
      expectedPayload(w, 400 + phase, w.rank, partner, host.data(), kOver);
      out[partner]->upload(host.data(), kOver);
      expectedPayload(w, 410 + phase, w.rank, w.rank, host.data(), kOver);
      later.upload(host.data(), kOver);
      EXPECT_OK(ncclSend(out[partner]->data(), kOver, ncclInt8, partner, w.comm, w.stream));
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(later.data(), kOver, ncclInt8, w.rank, w.comm, w.stream));
      EXPECT_OK(ncclRecv(out[partner]->data(), kOver, ncclInt8, w.rank, w.comm, w.stream));
      EXPECT_OK(ncclGroupEnd());
    } else {
      EXPECT_OK(ncclRecv(in[partner]->data(), kOver, ncclInt8, partner, w.comm, w.stream));
    }
    EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
    if (sends) {
      out[partner]->download(host.data(), kOver);
      expectedPayload(w, 410 + phase, w.rank, w.rank, want.data(), kOver);
      EXPECT_TRUE(memcmp(host.data(), want.data(), kOver) == 0, "the self copy did not land");
    } else {
      in[partner]->download(host.data(), kOver);
      expectedPayload(w, 400 + phase, partner, w.rank, want.data(), kOver);
      EXPECT_TRUE(memcmp(host.data(), want.data(), kOver) == 0,
                  "phase %d: the bytes from %d were overwritten before they left", phase, partner);
    }
  }
  printf(
      "rank %d: direct: regMrCuda %lld isendCuda %lld irecvCuda %lld iflushCuda %lld (regMr "
      "%lld)\n",
      ctx.env.rank, counter("regMrCuda"), counter("isendCuda"), counter("irecvCuda"),
      counter("iflushCuda"), counter("regMr"));
  EXPECT_TRUE(counter("isendCuda") > 0 && counter("irecvCuda") > 0,
              "nothing went directly: isendCuda %lld irecvCuda %lld", counter("isendCuda"),
              counter("irecvCuda"));
  // Every direct receive is flushed (iflush per link) before its stream reads it.
  EXPECT_TRUE(counter("iflushCuda") > 0, "%lld direct receives, no flush", counter("irecvCuda"));
  // One registration per buffer and link at most, however many rounds used it.
  long long remote = 0;
  for (int q = 0; q < w.nranks; ++q) remote += hostOf(q) != hostOf(w.rank);
  const char* linksEnv = getenv("FERRY_NET_LINKS");
  const long long links = linksEnv != nullptr ? atoi(linksEnv) : 1;
  EXPECT_TRUE(regsAfterFirst > 0 && counter("regMrCuda") <= 2 * remote * links,
              "device registrations: %lld after round 1, %lld after round 3 (at most %lld: one "
              "per buffer and link)",
              regsAfterFirst, counter("regMrCuda"), 2 * remote * links);
  EXPECT_OK(ncclFerryBootstrapBarrier(comm));
  w.destroy();
  EXPECT_OK(ncclFerryStreamDestroy(w.stream));
  dlclose(lib);
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<void(Ctx&)>> cases = {
      {"connect", caseConnect},   {"initdestroy", caseInitDestroy}, {"bogus", caseBogus},
      {"badlinks", caseBadLinks}, {"plugin", casePlugin},           {"mismatch", caseMismatch},
      {"gdr", caseGdr},
  };
  if (argc != 2 || cases.count(argv[1]) == 0) {
    fprintf(stderr, "usage: ferry-run -n N %s <connect|initdestroy|bogus|plugin|mismatch|gdr>\n",
            argv[0]);
    return 2;
  }
  Ctx ctx;
  ctx.env = launchEnv();
  if (ctx.env.nranks % kRanksPerHost != 0 || ctx.env.nranks < 2 * kRanksPerHost) {
    fprintf(stderr, "%s: run with a multiple of %d ranks, at least %d\n", argv[0], kRanksPerHost,
            2 * kRanksPerHost);
    return 2;
  }
  prepare(ctx);
  cases.at(argv[1])(ctx);
  // The log stays when something failed: it shows what was connected.
  if (gFailures == 0) unlink(ctx.logPath.c_str());
  printf("%s %s (rank %d): %d failure(s)%s%s\n", gFailures == 0 ? "PASS" : "FAIL", argv[1],
         ctx.env.rank, gFailures.load(),
         gFailures == 0 ? "" : "; log: ", gFailures == 0 ? "" : ctx.logPath.c_str());
  return gFailures == 0 ? 0 : 1;
}
