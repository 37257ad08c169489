// A rank of four dies in the middle of a training-like loop; every survivor
// must get an error within 30 s (comm/liveness.h), with ncclRemoteError as
// its async error and a last error that names the dead rank, and must be
// able to abort its communicator. The program forks its four ranks itself
// (a launcher would stop the run when one dies) and watches them.
//
// Modes (argv[1]):
//   coll     all-reduce + 4 MiB SM-free send/recv ring per group on the NULL
//            stream; the victim _exit()s
//   smfree   4 MiB SM-free send/recv ring only; victim SIGKILLed
//   kernel   all-reduce + 256 KiB kernel send/recv (NCCL_PASS_SM=0); SIGKILL
//   net      ranks 0,1 and 2,3 on two emulated hosts: all-reduce (its ring
//            crossing hosts through the proxy) + SM-free ring; SIGKILL
//   netkernel net, with NCCL_PASS_SM=0: the send/recv ring is kernel p2p,
//            its lanes across hosts carried by the proxy's hops; SIGKILL
//   hier     net, with NCCL_ALGO=Tree: the all-reduce runs hierarchically
//            (comm/hier_allreduce.h), on internal communicators that have
//            no liveness ring of their own; SIGKILL
//   silent   coll, but the victim stops (SIGSTOP): only its silence tells
//            (FERRY_PEER_TIMEOUT=3)
//   forked   coll, but the victim first forks a child (as a data loader
//            does) that outlives it by 15 s, and silence never counts
//            (FERRY_PEER_TIMEOUT=0): the survivors must learn of the death
//            from the closed connection, which the child must not hold open
//   shrink   coll, then the survivors shrink the communicator without the
//            dead rank (NCCL_SHRINK_ABORT) and run verified groups on it
//   wincoll  an all-gather into a symmetric window (comm/window_coll.h:
//            SM-free copies on an internal communicator, which has no
//            liveness ring of its own) + SM-free ring; SIGKILL
//   graceful the victim leaves after its last group and exits normally
//            without destroying its communicator; the survivors go on
//            with a ring among themselves (300 groups) and must see no error
//
// Data is fresh every iteration (depends on rank and iteration), outputs are
// poisoned first and checked element-wise against values computed here.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ferry.h"
#include "mp_check.h"
#include "nccl.h"

using namespace ferry::test;

namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;
constexpr int kDeathIter = 4;  // the victim dies after this many good iterations
constexpr double kLimitS = 30.0;
constexpr double kForkedLimitS = 8.0;  // well before the forked child exits
constexpr int kGracefulIters = 300;

struct Shared {
  std::atomic<int64_t> deathNs{0};     // when the victim died (steady clock)
  std::atomic<int> goodIters[kRanks];  // verified iterations per rank
  double noticedS[kRanks];             // survivor: death -> error
};

struct Mode {
  std::string name;
  bool coll = false;    // an all-reduce in every group
  size_t p2pBytes = 0;  // send/recv ring message size
  bool net = false;
  bool silent = false;
  bool graceful = false;
  bool shrink = false;
  bool forked = false;
  bool wincoll = false;  // the group's collective: an all-gather into a window
};

Mode parseMode(const char* s) {
  Mode m;
  m.name = s;
  m.coll = m.name == "coll" || m.name == "kernel" || m.name == "silent" || m.name == "shrink" ||
           m.name == "forked" || m.name == "net" || m.name == "hier" || m.name == "netkernel";
  m.p2pBytes = m.name == "kernel" || m.name == "netkernel" ? (256u << 10) : (4u << 20);
  m.net = m.name == "net" || m.name == "hier" || m.name == "netkernel";
  m.silent = m.name == "silent";
  m.graceful = m.name == "graceful";
  m.shrink = m.name == "shrink";
  m.forked = m.name == "forked";
  m.wincoll = m.name == "wincoll";
  return m;
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

float valueOf(int rank, int iter, size_t i) {
  return static_cast<float>((rank * 131 + iter * 17 + static_cast<int>(i % 1009)) % 257) - 128.0f;
}

struct Buffers {
  std::vector<float> arSend, arRecv, p2pSend, p2pRecv;
  float* win = nullptr;  // wincoll: kRanks shards of kWinShard, a symmetric window
  explicit Buffers(size_t p2pElems)
      : arSend(1 << 16), arRecv(1 << 16), p2pSend(p2pElems), p2pRecv(p2pElems) {}
};
// Floats per rank in wincoll's all-gather: 256 KiB, above the
// FERRY_WIN_COLL_MIN_BYTES the test sets (liveness.cmake).
constexpr size_t kWinShard = size_t{1} << 16;

// One group: [all-reduce] + send to `next`, receive from `prev`.
ncclResult_t runGroup(const Mode& m, ncclComm_t comm, cudaStream_t s, Buffers& b, int next,
                      int prev) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  if (m.coll) {
    r = ncclAllReduce(b.arSend.data(), b.arRecv.data(), b.arSend.size(), ncclFloat, ncclSum, comm,
                      s);
  }
  if (r == ncclSuccess && b.win != nullptr) {
    r = ncclAllGather(b.p2pSend.data(), b.win, kWinShard, ncclFloat, comm, s);
  }
  if (r == ncclSuccess) r = ncclSend(b.p2pSend.data(), b.p2pSend.size(), ncclFloat, next, comm, s);
  if (r == ncclSuccess) r = ncclRecv(b.p2pRecv.data(), b.p2pRecv.size(), ncclFloat, prev, comm, s);
  ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

void fill(Buffers& b, int rank, int iter) {
  for (size_t i = 0; i < b.arSend.size(); ++i) b.arSend[i] = valueOf(rank, iter, i);
  for (size_t i = 0; i < b.p2pSend.size(); ++i) b.p2pSend[i] = valueOf(rank, iter + 1000, i);
  std::fill(b.arRecv.begin(), b.arRecv.end(), -7777.0f);  // poison
  std::fill(b.p2pRecv.begin(), b.p2pRecv.end(), -7777.0f);
  if (b.win != nullptr) std::fill(b.win, b.win + kWinShard * kRanks, -7777.0f);
}

bool verify(const Mode& m, const Buffers& b, int prev, int iter) {
  if (m.coll) {
    for (size_t i = 0; i < b.arRecv.size(); ++i) {
      float want = 0;
      for (int r = 0; r < kRanks; ++r) want += valueOf(r, iter, i);
      if (b.arRecv[i] != want) return false;
    }
  }
  for (size_t i = 0; i < b.p2pRecv.size(); ++i) {
    if (b.p2pRecv[i] != valueOf(prev, iter + 1000, i)) return false;
  }
  for (size_t i = 0; b.win != nullptr && i < kWinShard * kRanks; ++i) {
    if (b.win[i] != valueOf(static_cast<int>(i / kWinShard), iter + 1000, i % kWinShard)) {
      return false;
    }
  }
  return true;
}

// The victim goes only once every rank has verified its iterations, so
// that everything before the death is checked (a death fails the whole
// communicator at once, an iteration in flight included).
void awaitEveryone(Shared* sh) {
  auto start = Clock::now();
  for (int r = 0; r < kRanks && secondsSince(start) < 30.0; ++r) {
    while (sh->goodIters[r].load() < kDeathIter && secondsSince(start) < 30.0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// The victim's end, by mode. Records the moment first.
[[noreturn]] void die(const Mode& m, Shared* sh) {
  awaitEveryone(sh);
  if (m.forked && fork() == 0) {
    // The worker: no NCCL, just alive; off the test's output pipes so the
    // harness does not wait for it.
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    sleep(15);
    exit(0);  // a normal exit: atexit handlers run in the child
  }
  sh->deathNs.store(nowNs());
  if (m.silent) {
    raise(SIGSTOP);  // the parent kills it later
    _exit(8);
  }
  if (m.coll) _exit(9);
  raise(SIGKILL);
  _exit(8);
}

// The recovery a fault-tolerant framework runs: a new communicator of the
// survivors (the parent's work aborted), checked with all-reduces and a
// ring exchange, then both destroyed.
void shrinkAndGoOn(ncclComm_t comm, int rank) {
  int dead[] = {kVictim};
  ncclComm_t small = nullptr;
  EXPECT_OK(ncclCommShrink(comm, dead, 1, &small, nullptr, NCCL_SHRINK_ABORT));
  int newRank = -1, count = -1;
  EXPECT_OK(ncclCommUserRank(small, &newRank));
  EXPECT_OK(ncclCommCount(small, &count));
  const int survivors[] = {0, 1, 3};
  EXPECT_TRUE(count == 3 && survivors[newRank] == rank, "rank %d became %d of %d", rank, newRank,
              count);
  Mode m = parseMode("shrink");
  Buffers b(1 << 16);
  const int next = (newRank + 1) % 3, prev = (newRank + 2) % 3;
  for (int iter = 50; iter < 60 && gFailures == 0; ++iter) {
    fill(b, newRank, iter);
    EXPECT_OK(runGroup(m, small, nullptr, b, next, prev));
    EXPECT_OK(ncclFerryStreamSynchronize(nullptr));
    for (size_t i = 0; i < b.arRecv.size(); ++i) {
      float want = 0;
      for (int r = 0; r < 3; ++r) want += valueOf(r, iter, i);
      if (b.arRecv[i] != want) {
        EXPECT_TRUE(false, "rank %d: shrunk all-reduce element %zu wrong", rank, i);
        break;
      }
    }
    EXPECT_TRUE(b.p2pRecv[0] == valueOf(prev, iter + 1000, 0) &&
                    b.p2pRecv.back() == valueOf(prev, iter + 1000, b.p2pRecv.size() - 1),
                "rank %d: shrunk ring data wrong", rank);
  }
  EXPECT_OK(ncclCommDestroy(small));
  EXPECT_OK(ncclCommDestroy(comm));
  printf("rank %d: shrunk to rank %d of 3 and ran 10 verified groups\n", rank, newRank);
}

// A survivor saw an error: it must be the dead peer's, named, and prompt.
int survivorChecks(ncclComm_t comm, int rank, ncclResult_t callResult, Shared* sh,
                   bool shrinkAfter) {
  int64_t death = sh->deathNs.load();
  double noticed = death > 0 ? (nowNs() - death) / 1e9 : -1;
  sh->noticedS[rank] = noticed;
  ncclResult_t state = ncclSuccess;
  EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  EXPECT_TRUE(state == ncclRemoteError, "rank %d: async error %d (call returned %d)", rank, state,
              callResult);
  std::string last = ncclGetLastError(comm);
  EXPECT_TRUE(last.find("rank " + std::to_string(kVictim)) != std::string::npos,
              "rank %d: last error does not name rank %d: %s", rank, kVictim, last.c_str());
  const double limit =
      getenv("FERRY_PEER_TIMEOUT") != nullptr && strcmp(getenv("FERRY_PEER_TIMEOUT"), "0") == 0
          ? kForkedLimitS
          : kLimitS;
  EXPECT_TRUE(death > 0 && noticed < limit, "rank %d noticed after %.1f s", rank, noticed);
  // New work is refused at once, and the communicator aborts cleanly.
  std::vector<float> x(16, 1.0f);
  EXPECT_RESULT(ncclSend(x.data(), x.size(), ncclFloat, (rank + 1) % kRanks, comm, nullptr),
                ncclRemoteError);
  // Abort (what a watchdog does), or destroy: neither may hang.
  auto t = Clock::now();
  if (shrinkAfter) {
    shrinkAndGoOn(comm, rank);
  } else if (rank == 3) {
    (void)ncclCommDestroy(comm);
  } else {
    EXPECT_OK(ncclCommAbort(comm));
  }
  EXPECT_TRUE(secondsSince(t) < 10.0, "rank %d: abort/destroy took %.1f s", rank, secondsSince(t));
  printf("rank %d: error %.3f s after the death: %s\n", rank, noticed, last.c_str());
  return gFailures == 0 ? 0 : 1;
}

// The survivors of a graceful exit: a ring among 0, 1, 3 (a fixed count:
// a rank that stopped early would leave its receiver waiting, rightly an
// error once that rank's process is gone).
int gracefulAfter(const Mode& m, ncclComm_t comm, cudaStream_t s, int rank, Buffers& b) {
  const int ring[] = {0, 1, 3};
  int pos = rank == 0 ? 0 : rank == 1 ? 1 : 2;
  int next = ring[(pos + 1) % 3], prev = ring[(pos + 2) % 3];
  Mode p2p = m;
  p2p.coll = false;
  int iter = 100;
  while (iter < 100 + kGracefulIters) {
    fill(b, rank, iter);
    EXPECT_OK(runGroup(p2p, comm, s, b, next, prev));
    EXPECT_OK(ncclFerryStreamSynchronize(s));
    EXPECT_TRUE(verify(p2p, b, prev, iter), "rank %d iteration %d: wrong data", rank, iter);
    if (gFailures > 0) break;
    ++iter;
  }
  ncclResult_t state = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  EXPECT_TRUE(state == ncclSuccess, "rank %d: async error %d after a peer left", rank, state);
  EXPECT_OK(ncclCommDestroy(comm));
  printf("rank %d: %d iterations after rank %d left, no error\n", rank, iter - 100, kVictim);
  return gFailures == 0 ? 0 : 1;
}

int runRank(const Mode& m, const ncclUniqueId& id, int rank, Shared* sh) {
  if (m.net) setenv("NCCL_HOSTID", rank < 2 ? "ferry-death-host-a" : "ferry-death-host-b", 1);
  ncclComm_t comm = nullptr;
  if (ncclFerrySetDevice(rank) != ncclSuccess) return 3;
  if (ncclCommInitRank(&comm, kRanks, id, rank) != ncclSuccess) return 3;
  cudaStream_t s = nullptr;  // coll: the NULL stream, as the reproducer
  if (m.name != "coll" && ncclFerryStreamCreate(&s) != ncclSuccess) return 3;
  Buffers b(m.p2pBytes / sizeof(float));
  ncclWindow_t win = nullptr;
  if (m.wincoll) {  // host runtime: ncclMemAlloc memory is host-addressable
    void* p = nullptr;
    const size_t bytes = kWinShard * kRanks * sizeof(float);
    if (ncclMemAlloc(&p, bytes) != ncclSuccess) return 3;
    if (ncclCommWindowRegister(comm, p, bytes, &win, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess) {
      return 3;
    }
    b.win = static_cast<float*>(p);
  }
  const int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
  auto start = Clock::now();
  for (int iter = 0; secondsSince(start) < 60.0; ++iter) {
    if (rank == kVictim && iter == kDeathIter && !m.graceful) die(m, sh);
    if (m.graceful && iter == kDeathIter) {
      if (rank == kVictim) {
        awaitEveryone(sh);
        exit(0);  // normal exit (atexit runs), no destroy
      }
      return gracefulAfter(m, comm, s, rank, b);
    }
    fill(b, rank, iter);
    ncclResult_t r = runGroup(m, comm, s, b, next, prev);
    if (r == ncclSuccess) r = ncclFerryStreamSynchronize(s);
    ncclResult_t state = ncclSuccess;
    if (r == ncclSuccess) r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess || state != ncclSuccess) {
      EXPECT_TRUE(iter >= kDeathIter || sh->deathNs.load() > 0,
                  "rank %d failed at iteration %d before the death", rank, iter);
      return survivorChecks(comm, rank, r, sh, m.shrink);
    }
    EXPECT_TRUE(verify(m, b, prev, iter), "rank %d iteration %d: wrong data", rank, iter);
    if (gFailures > 0) return 1;
    sh->goodIters[rank].fetch_add(1);
  }
  EXPECT_TRUE(false, "rank %d never noticed rank %d's death", rank, kVictim);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: %s coll|smfree|kernel|net|netkernel|hier|silent|graceful|shrink|forked\n",
            argv[0]);
    return 2;
  }
  const Mode m = parseMode(argv[1]);
  unsetenv("NCCL_COMM_ID");
  setenv("FERRY_RUNTIME", "host", 1);
  if (m.name == "kernel" || m.name == "netkernel") setenv("NCCL_PASS_SM", "0", 1);
  if (m.silent) setenv("FERRY_PEER_TIMEOUT", "3", 1);
  if (m.forked) setenv("FERRY_PEER_TIMEOUT", "0", 1);
  if (m.net) setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  if (m.name == "hier") setenv("NCCL_ALGO", "Tree", 1);
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return 2;
  new (sh) Shared();
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));  // the root serves from this process
  pid_t pids[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      int rc = runRank(m, id, r, sh);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
  }
  int status[kRanks] = {};
  bool done[kRanks] = {};
  auto start = Clock::now();
  for (int left = kRanks; left > 0 && secondsSince(start) < 90.0;) {
    for (int r = 0; r < kRanks; ++r) {
      if (done[r] || waitpid(pids[r], &status[r], WNOHANG | WUNTRACED) != pids[r]) continue;
      if (WIFSTOPPED(status[r])) continue;  // the silent victim: killed below
      done[r] = true;
      --left;
    }
    bool survivorsDone = true;
    for (int r = 0; r < kRanks; ++r) survivorsDone = survivorsDone && (r == kVictim || done[r]);
    if (m.silent && survivorsDone && !done[kVictim]) kill(pids[kVictim], SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < kRanks; ++r) {
    if (done[r]) continue;
    EXPECT_TRUE(false, "rank %d still running after 90 s: killed", r);
    kill(pids[r], SIGKILL);
    waitpid(pids[r], &status[r], 0);
  }
  for (int r = 0; r < kRanks; ++r) {
    bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    if (r == kVictim && !m.graceful) {
      ok = (WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL) ||
           (WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 9);
    }
    EXPECT_TRUE(ok, "rank %d ended with status 0x%x", r, status[r]);
    EXPECT_TRUE(sh->goodIters[r].load() >= kDeathIter, "rank %d verified only %d iterations", r,
                sh->goodIters[r].load());
  }
  printf("%s peer_death %s: %d failure(s)\n", gFailures == 0 ? "PASS" : "FAIL", m.name.c_str(),
         gFailures.load());
  return gFailures == 0 ? 0 : 1;
}
