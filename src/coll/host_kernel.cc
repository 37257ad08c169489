#include "coll/host_kernel.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "algo/coll_ll.h"
#include "algo/coll_ring.h"
#include "algo/p2p_kernel.h"
#include "core/log.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// A waiting channel thread naps 20 us, doubling up to this. With 8 ranks'
// channel threads on CI's two cores most of them wait, and a fixed 20 us
// nap spent ~45% of the CPU in sleep/wake churn (this VM pays dearly for
// each context switch); capped at 320 us, p2p.alltoall(.lanes).n8 took
// 12-14 s instead of 18-20, collectives unchanged (at 1 ms the ring
// collectives slowed: a step's flag is seen up to a nap late).
constexpr int64_t kMaxNapUs = 320;

// The CPU platform of algo/coll_ring.h: one thread runs a channel.
struct HostPlatform {
  struct Ctx {
    const volatile uint32_t* abortFlag;
    uint64_t timeoutNs;
    int channel;
    int pos;
    bool timedOut = false;
  };

  // Spins until ready() (an acquire or relaxed look at shared memory, see
  // the callers); false on abort, or on a timeout after a WARN naming `what`.
  template <class Ready>
  static bool spin(Ctx& ctx, const char* what, unsigned long long have, unsigned long long want,
                   Ready ready) {
    if (ready()) return true;
    const auto start = Clock::now();
    auto nap = std::chrono::microseconds(20);
    for (uint64_t spins = 0;; ++spins) {
      if (ready()) return true;
      if (spins < 64) continue;
      if (ctx.abortFlag != nullptr && *ctx.abortFlag != 0) return false;
      auto waited = Clock::now() - start;
      if (ctx.timeoutNs != 0 &&
          static_cast<uint64_t>(std::chrono::nanoseconds(waited).count()) > ctx.timeoutNs) {
        FERRY_WARN(
            "collective: ring position %d channel %d waited %.1f s for a peer (%s %llu, "
            "want %llu); failing the stream (FERRY_COLL_TIMEOUT)",
            ctx.pos, ctx.channel, std::chrono::duration<double>(waited).count(), what, have, want);
        ctx.timedOut = true;
        return false;
      }
      // Ranks share few cores in CI: yield first, then nap.
      if (waited < std::chrono::microseconds(200)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(kMaxNapUs));
      }
    }
  }

  // Acquire: pairs with the release store in post(), so the slot data (or
  // the drained state) the poster published is visible afterwards.
  static bool waitGeq(Ctx& ctx, const uint64_t* flag, uint64_t target) {
    std::atomic_ref<const uint64_t> word(*flag);
    return spin(ctx, "flag", word.load(std::memory_order_relaxed), target,
                [&] { return word.load(std::memory_order_acquire) >= target; });
  }

  // Release: every earlier store to the slot (sender) and load from it
  // (receiver) happens before the peer's acquire of `value`.
  static void post(Ctx&, uint64_t* flag, uint64_t value) {
    std::atomic_ref<uint64_t>(*flag).store(value, std::memory_order_release);
  }
  // Relaxed: the post() that follows on this thread (release) publishes it.
  static void note(Ctx&, uint64_t* word, uint64_t value) {
    std::atomic_ref<uint64_t>(*word).store(value, std::memory_order_relaxed);
  }

  // ---- LL (algo/coll_ll.h): one thread does every line of a step ----
  struct LineIo {
    // Relaxed loads suffice: data and flag share each 8-byte word.
    static int read(const algo::LlWait& w, const algo::LlLine* line, uint32_t flag,
                    uint64_t* data) {
      std::atomic_ref<const uint64_t> w0(line->word[0]);
      std::atomic_ref<const uint64_t> w1(line->word[1]);
      uint64_t a = 0;
      uint64_t b = 0;
      Ctx ctx{w.abortFlag, w.timeoutNs, w.channel, w.pos};
      bool ok = spin(ctx, "LL line flag", w0.load(std::memory_order_relaxed) >> 32, flag, [&] {
        a = w0.load(std::memory_order_relaxed);
        b = w1.load(std::memory_order_relaxed);
        return algo::llReady(a, b, flag);
      });
      *data = algo::llData(a, b);
      return ok ? algo::kLlOk : ctx.timedOut ? algo::kLlTimedOut : algo::kLlAborted;
    }
    // Acquire (free on x86): pairs with the receiver's head store.
    static int waitHead(const algo::LlWait& w, const uint64_t* head, uint64_t min) {
      Ctx ctx{w.abortFlag, w.timeoutNs, w.channel, w.pos};
      return waitGeq(ctx, head, min) ? algo::kLlOk
             : ctx.timedOut          ? algo::kLlTimedOut
                                     : algo::kLlAborted;
    }
    static void write(algo::LlLine* line, uint64_t data, uint32_t flag) {
      std::atomic_ref<uint64_t>(line->word[0])
          .store(algo::llWord0(data, flag), std::memory_order_relaxed);
      std::atomic_ref<uint64_t>(line->word[1])
          .store(algo::llWord1(data, flag), std::memory_order_relaxed);
    }
  };

  template <class T, class Op>
  static bool llStep(Ctx& ctx, const Op& op, const T* local, const algo::LlLine* recv,
                     uint32_t recvFlag, const algo::LlSendTo& send, T* dst, uint64_t n,
                     bool final) {
    const algo::LlWait wait{ctx.abortFlag, ctx.timeoutNs, ctx.pos, ctx.channel};
    const int r =
        algo::llLines<LineIo, T, Op>(wait, op, local, recv, recvFlag, send, dst, n, final, 0, 1);
    if (r == algo::kLlTimedOut) ctx.timedOut = true;
    return r == algo::kLlOk;
  }
  // Release (cheap here): the step's line reads come before the peer's reuse.
  static void postHead(Ctx& ctx, uint64_t* flag, uint64_t value) { post(ctx, flag, value); }

  template <class T, class Op>
  static void reduceCopy(Ctx&, const Op& op, const T* local, const T* fifo, T* dst0, T* dst1,
                         uint64_t n, bool final) {
    // memcpy per element: host buffers need not be aligned.
    for (uint64_t i = 0; i < n; ++i) {
      T v;
      if (local != nullptr) {
        memcpy(&v, local + i, sizeof(T));
        v = op.pre(v);
        if (fifo != nullptr) {
          T f;
          memcpy(&f, fifo + i, sizeof(T));
          v = op.combine(v, f);
        }
      } else {
        memcpy(&v, fifo + i, sizeof(T));
      }
      if (final) v = op.post(v);
      if (dst0 != nullptr) memcpy(dst0 + i, &v, sizeof(T));
      if (dst1 != nullptr) memcpy(dst1 + i, &v, sizeof(T));
    }
  }
};

// Runs every channel in turn: channels are independent rings and every rank
// visits them in the same order, so one thread cannot wedge them.
template <class T, int kFn>
int runTyped(const algo::CollArgs& a) {
  algo::CollOp<T, kFn> op{};
  op.scalar = a.scalarPtr != nullptr ? *static_cast<const T*>(a.scalarPtr)
                                     : algo::scalarFromBits<T>(a.scalarBits);
  op.nranks = a.avg != 0 ? a.avg : a.nranks;
  op.avg = a.avg != 0;
  using Op = algo::CollOp<T, kFn>;
  for (int h = 0; h < a.nchannels; ++h) {
    HostPlatform::Ctx ctx{a.abortFlag, a.timeoutNs, h, a.pos};
    algo::RingChannel& ch = a.channels[h];
    bool ok = false;
    if (a.proto == algo::kProtoLL) {
      algo::LlPrims<HostPlatform, T, Op> prims(ctx, ch, op, a.nslots, a.slotBytes);
      ok = algo::runRingChannel(prims, a, h);
      prims.saveTo(&ch);
    } else {
      algo::RingPrims<HostPlatform, T, Op> prims(ctx, ch, op, a.nslots,
                                                 algo::sliceEltsFor(a.slotBytes, sizeof(T)));
      ok = algo::runRingChannel(prims, a, h);
      prims.saveTo(&ch);
    }
    if (!ok) return ctx.timedOut ? 1 : 0;  // aborted: stop quietly, like the kernel
  }
  return 0;
}

template <class T>
int runFn(const algo::CollArgs& a) {
  switch (a.fn) {
    case algo::kFnSum:
      return runTyped<T, algo::kFnSum>(a);
    case algo::kFnProd:
      return runTyped<T, algo::kFnProd>(a);
    case algo::kFnMax:
      return runTyped<T, algo::kFnMax>(a);
    case algo::kFnMin:
      return runTyped<T, algo::kFnMin>(a);
    case algo::kFnPreMulSum:
      return runTyped<T, algo::kFnPreMulSum>(a);
    default:
      return runTyped<T, algo::kFnCopy>(a);
  }
}

struct Dispatch {
  const algo::CollArgs& a;
  int result = 0;
  template <class T>
  void operator()() {
    result = runFn<T>(a);
  }
};

}  // namespace

int hostCollKernel(void** args) {
  const auto& a = *static_cast<const algo::CollArgs*>(args[0]);
  const int dataType = *static_cast<const int*>(args[1]);
  Dispatch d{a};
  if (!algo::dispatchType(dataType, d)) return 1;
  return d.result;
}

namespace {

// Threads that run a launch's blocks, every block on its own thread at once
// (a block may wait for another block of the launch, or for a peer's block
// that waits for one of ours), kept between launches: creating 2 x ranks x
// lanes threads per kernel-p2p launch cost more than the launch's work (and
// a thread's creation zeroes its TLS, which the CUDA runtime makes large in a
// CUDA build: p2p.stress.ll.n3 took 98 s there against 60 s without CUDA).
// Process-wide and leaked; a forked child starts with an empty pool (its
// parent's threads do not exist in it).
class BlockPool {
 public:
  static BlockPool& instance() {
    static BlockPool* p = new BlockPool();  // leaked: parked threads outlive exit
    return *p;
  }

  // Runs fn(b) for every b in [0, n), each on its own thread, and waits.
  void run(int n, const std::function<void(int)>& fn) {
    Latch latch(n);
    std::vector<Worker*> ws = take(n);
    for (int b = 0; b < n; ++b) {
      Worker* w = ws[b];
      std::lock_guard<std::mutex> lock(w->mu);
      w->job = [&fn, &latch, b] {
        fn(b);
        latch.arrive();
      };
      w->cv.notify_one();
    }
    latch.wait();
  }

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::function<void()> job;  // guarded by mu
  };
  struct Latch {
    explicit Latch(int n) : left(n) {}
    void arrive() {
      std::lock_guard<std::mutex> lock(mu);
      if (--left == 0) cv.notify_all();
    }
    void wait() {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [this] { return left == 0; });
    }
    std::mutex mu;
    std::condition_variable cv;
    int left;
  };

  std::vector<Worker*> take(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ != getpid()) {  // a forked child: the parent's workers are not here
      idle_.clear();
      pid_ = getpid();
    }
    std::vector<Worker*> out;
    while (static_cast<int>(out.size()) < n && !idle_.empty()) {
      out.push_back(idle_.back());
      idle_.pop_back();
    }
    while (static_cast<int>(out.size()) < n) {
      auto* w = new Worker();  // lives as long as its thread: the process
      std::thread([this, w] { serve(w); }).detach();
      out.push_back(w);
    }
    return out;
  }

  void serve(Worker* w) {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [w] { return static_cast<bool>(w->job); });
        job = std::move(w->job);
        w->job = nullptr;
      }
      job();
      std::lock_guard<std::mutex> lock(mu_);
      idle_.push_back(w);
    }
  }

  std::mutex mu_;
  std::vector<Worker*> idle_;  // guarded by mu_
  pid_t pid_ = getpid();       // guarded by mu_
};

template <class Args>
int runHostP2p(void** args) {
  const auto& a = *static_cast<const Args*>(args[0]);
  std::atomic<int> failed{0};
  BlockPool::instance().run(a.nblocks, [&a, &failed](int b) {
    HostPlatform::Ctx ctx{a.abortFlag, a.timeoutNs, b, a.pos};
    if (!algo::runP2pBlock<HostPlatform>(ctx, a, b) && ctx.timedOut) failed.store(1);
  });
  return failed.load();
}

}  // namespace

int hostP2pKernel(void** args) {
  return runHostP2p<algo::P2pArgs>(args);
}

int hostP2pKernelSmall(void** args) {
  return runHostP2p<algo::P2pArgsSmall>(args);
}

}  // namespace ferry
