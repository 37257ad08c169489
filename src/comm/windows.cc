#include "comm/windows.h"

#include <algorithm>
#include <cstring>

#include "comm/communicator.h"
#include "core/log.h"
#include "nccl.h"

namespace ferry {
namespace {

// What each rank publishes at registration.
struct WindowInfo {
  uint32_t valid;     // this rank's arguments passed its checks
  uint32_t mappable;  // `post` describes the buffer for peer processes
  int32_t flags;
  uint32_t pad;
  uint64_t size;
  PostInfo post;
};
static_assert(std::is_trivially_copyable_v<WindowInfo>);

constexpr int kKnownFlags = NCCL_WIN_COLL_SYMMETRIC;

// This rank's own checks; a failure is WARNed here and travels as valid=0.
Status checkLocal(Communicator* comm, void* buffer, uint64_t size, int flags) {
  const char* fn = "ncclCommWindowRegister";
  if (buffer == nullptr || size == 0) {
    FERRY_FAIL(ncclInvalidArgument, "%s: buff %p and size %llu must be set", fn, buffer,
               static_cast<unsigned long long>(size));
  }
  if ((flags & ~kKnownFlags) != 0) {
    FERRY_FAIL(ncclInvalidArgument,
               "%s: unknown winFlags 0x%x (NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC)", fn,
               flags);
  }
  bool ok = false;
  FERRY_CHECK(comm->runtime()->checkUserBuffer(buffer, size, &ok));
  if (!ok) FERRY_FAIL(ncclInvalidArgument, "%s: %p is not device-accessible memory", fn, buffer);
  return ncclSuccess;
}

// Every rank's verdict on the same table: the first bad rank, or unequal
// symmetric windows, fails all of them alike.
Status checkAll(const std::vector<WindowInfo>& infos, int me) {
  const char* fn = "ncclCommWindowRegister";
  for (size_t r = 0; r < infos.size(); ++r) {
    if (infos[r].valid == 0) {
      if (static_cast<int>(r) == me) return ncclInvalidArgument;  // WARNed already
      FERRY_FAIL(ncclInvalidArgument, "%s: rank %zu passed invalid arguments", fn, r);
    }
    if (infos[r].flags != infos[0].flags) {
      FERRY_FAIL(ncclInvalidArgument, "%s: rank %zu passed winFlags 0x%x, rank 0 0x%x", fn, r,
                 infos[r].flags, infos[0].flags);
    }
    if ((infos[0].flags & NCCL_WIN_COLL_SYMMETRIC) != 0 && infos[r].size != infos[0].size) {
      FERRY_FAIL(ncclInvalidArgument,
                 "%s: NCCL_WIN_COLL_SYMMETRIC needs one size on every rank (rank %zu: %llu "
                 "bytes, rank 0: %llu)",
                 fn, r, static_cast<unsigned long long>(infos[r].size),
                 static_cast<unsigned long long>(infos[0].size));
    }
  }
  return ncclSuccess;
}

}  // namespace

Status WindowTable::add(void* buffer, uint64_t size, int flags, Window** out) {
  *out = nullptr;
  const int n = comm_->nranks(), me = comm_->rank();
  std::vector<WindowInfo> infos(n);
  memset(infos.data(), 0, sizeof(WindowInfo) * n);
  WindowInfo& mine = infos[me];
  mine.flags = flags;
  mine.size = size;
  bool mappable = false;
  if (checkLocal(comm_, buffer, size, flags) == ncclSuccess &&
      comm_->p2p()->describeForPeers(buffer, size, &mine.post, &mappable) == ncclSuccess) {
    mine.valid = 1;
    mine.mappable = mappable ? 1 : 0;
  }
  // Every rank takes part, valid or not, so none is left waiting.
  if (n > 1) FERRY_CHECK(comm_->bootstrap()->allGather(infos.data(), sizeof(WindowInfo)));
  FERRY_CHECK(checkAll(infos, me));
  auto w = std::make_unique<Window>();
  w->buffer = buffer;
  w->size = size;
  w->flags = flags;
  w->mappable = mappable;
  w->collReady = (flags & NCCL_WIN_COLL_SYMMETRIC) != 0 && n > 1;
  for (int q = 0; q < n; ++q) {
    const bool reached = q == me || comm_->p2p()->mapsPeerMemory(q);
    w->collReady = w->collReady && infos[q].mappable != 0 && reached;
  }
  for (int q = 0; q < n; ++q) {
    if (q == me || infos[q].mappable == 0 || !comm_->p2p()->mapsPeerMemory(q)) continue;
    std::shared_ptr<PeerMapping> m;
    // Not fatal: a message that touches the window maps it then, or stages.
    if (comm_->p2p()->mapPeerBuffer(q, infos[q].post, &m) != ncclSuccess) {
      FERRY_INFO(kLogP2p, "window %p: peer %d's window not mapped now (mapped on first use)",
                 buffer, q);
      continue;
    }
    w->mappings.push_back(std::move(m));
    ++w->peersMapped;
  }
  FERRY_INFO(kLogInit | kLogP2p,
             "window %p (%llu bytes, flags 0x%x): %d peer window(s) mapped; this buffer %s "
             "mappable by peer processes; collectives %s copy between the windows",
             buffer, static_cast<unsigned long long>(size), flags, w->peersMapped,
             mappable ? "is" : "is not", w->collReady ? "may" : "do not");
  std::lock_guard<std::mutex> lock(mu_);
  *out = w.get();
  windows_.push_back(std::move(w));
  return ncclSuccess;
}

Status WindowTable::remove(Window* w) {
  std::unique_ptr<Window> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(windows_.begin(), windows_.end(),
                           [w](const std::unique_ptr<Window>& p) { return p.get() == w; });
    if (w == nullptr || it == windows_.end()) {
      FERRY_FAIL(ncclInvalidArgument,
                 "ncclCommWindowDeregister: %p is not a window of this communicator",
                 static_cast<void*>(w));
    }
    gone = std::move(*it);
    windows_.erase(it);
  }
  return ncclSuccess;  // the mappings are let go here, outside the lock
}

Status WindowTable::find(Window* w, const Window** out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : windows_) {
    if (p.get() == w) {
      *out = w;
      return ncclSuccess;
    }
  }
  FERRY_FAIL(ncclInvalidArgument, "%p is not a window of this communicator", static_cast<void*>(w));
}

const Window* WindowTable::collWindowHolding(const void* p, uint64_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : windows_) {
    const auto base = reinterpret_cast<uintptr_t>(w->buffer);
    if (w->collReady && at >= base && bytes <= w->size && at - base <= w->size - bytes) {
      return w.get();
    }
  }
  return nullptr;
}

void WindowTable::clear() {
  std::vector<std::unique_ptr<Window>> gone;
  std::lock_guard<std::mutex> lock(mu_);
  gone.swap(windows_);
}

size_t WindowTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return windows_.size();
}

}  // namespace ferry
