#include "coll/host_kernel.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "algo/coll_ring.h"
#include "algo/p2p_kernel.h"
#include "core/log.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// The CPU platform of algo/coll_ring.h: one thread runs a channel.
struct HostPlatform {
  struct Ctx {
    const volatile uint32_t* abortFlag;
    uint64_t timeoutNs;
    int channel;
    int pos;
    bool timedOut = false;
  };

  // Acquire: pairs with the release store in post(), so the slot data (or
  // the drained state) the poster published is visible afterwards.
  static bool waitGeq(Ctx& ctx, const uint64_t* flag, uint64_t target) {
    std::atomic_ref<const uint64_t> word(*flag);
    if (word.load(std::memory_order_acquire) >= target) return true;
    const auto start = Clock::now();
    for (uint64_t spins = 0;; ++spins) {
      if (word.load(std::memory_order_acquire) >= target) return true;
      if (spins < 64) continue;
      if (ctx.abortFlag != nullptr && *ctx.abortFlag != 0) return false;
      auto waited = Clock::now() - start;
      if (ctx.timeoutNs != 0 &&
          static_cast<uint64_t>(std::chrono::nanoseconds(waited).count()) > ctx.timeoutNs) {
        FERRY_WARN(
            "collective: ring position %d channel %d waited %.1f s for a peer (flag %llu, "
            "want %llu); failing the stream (FERRY_COLL_TIMEOUT)",
            ctx.pos, ctx.channel, std::chrono::duration<double>(waited).count(),
            static_cast<unsigned long long>(word.load(std::memory_order_relaxed)),
            static_cast<unsigned long long>(target));
        ctx.timedOut = true;
        return false;
      }
      // Ranks share few cores in CI: yield first, then nap.
      if (waited < std::chrono::microseconds(200)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }

  // Release: every earlier store to the slot (sender) and load from it
  // (receiver) happens before the peer's acquire of `value`.
  static void post(Ctx&, uint64_t* flag, uint64_t value) {
    std::atomic_ref<uint64_t>(*flag).store(value, std::memory_order_release);
  }

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
  op.nranks = a.nranks;
  op.avg = a.avg != 0;
  const uint64_t slice = algo::sliceEltsFor(a.slotBytes, sizeof(T));
  for (int h = 0; h < a.nchannels; ++h) {
    HostPlatform::Ctx ctx{a.abortFlag, a.timeoutNs, h, a.pos};
    algo::RingChannel& ch = a.channels[h];
    algo::RingPrims<HostPlatform, T, algo::CollOp<T, kFn>> prims(ctx, ch, op, a.nslots, slice);
    bool ok = algo::runRingChannel(prims, a, h, slice);
    ch.sendStep = prims.sendStep();
    ch.recvStep = prims.recvStep();
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

int hostP2pKernel(void** args) {
  const auto& a = *static_cast<const algo::P2pArgs*>(args[0]);
  // Every block at once, as on a GPU: a block may wait for a peer's block
  // that itself waits for one of ours.
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  threads.reserve(a.nblocks);
  for (int b = 0; b < a.nblocks; ++b) {
    threads.emplace_back([&a, &failed, b] {
      HostPlatform::Ctx ctx{a.abortFlag, a.timeoutNs, b, a.pos};
      if (!algo::runP2pBlock<HostPlatform>(ctx, a, b) && ctx.timedOut) failed.store(1);
    });
  }
  for (std::thread& t : threads) t.join();
  return failed.load();
}

}  // namespace ferry
