#include "transport/net_buffers.h"

#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "core/clock.h"

namespace ferry {

NetBuffers::~NetBuffers() {
  // Deregistered before the links close their comms (the connection
  // destroys its buffers first); the memory goes after its registrations.
  for (Region& b : blocks_) deregister(b.mhandles);
  for (DirectRegion& d : direct_) deregister(d.mhandles);
}

void NetBuffers::deregister(NetMhandles& mhandles) {
  for (size_t k = 0; k < links_.size(); ++k) {
    links_[k]->deregMr(mhandles[k]);
    mhandles[k] = nullptr;
  }
}

Status NetBuffers::init() {
  FERRY_CHECK(runtime_->allocHost(sizeof(NetWords), &wordMem_));
  // The words are plain memory until now: construct the atomics in place.
  words_ = new (wordMem_->ptr()) NetWords{};
  words_->filled.store(0);
  words_->sent.store(0);
  words_->arrived.store(0);
  words_->drained.store(0);
  words_->ready.store(0);
  words_->taken.store(0);
  directCapable_ = true;
  for (NetLink* l : links_) {
    net::NetProperties p;
    const bool known = ok(l->engine->properties(l->dev, &p));
    directCapable_ = directCapable_ && known && (p.ptrSupport & net::kPtrCuda) != 0;
  }
  return ncclSuccess;
}

bool NetBuffers::directRegistration(const rt::AllocationInfo& a, NetMhandles* mhandles) {
  for (const DirectRegion& d : direct_) {
    if (d.allocId != a.allocId) continue;
    *mhandles = d.mhandles;
    return true;
  }
  if (!directCapable_ || directRefused_ || direct_.size() >= kMaxDirectRegions) return false;
  DirectRegion d;
  d.allocId = a.allocId;
  void* base = reinterpret_cast<void*>(a.base);
  for (size_t k = 0; k < links_.size(); ++k) {
    Status s = links_[k]->regMr(base, a.size, &d.mhandles[k], net::kPtrCuda);
    if (ok(s)) continue;
    d.mhandles[k] = nullptr;  // the refused one holds nothing
    deregister(d.mhandles);
    directRefused_ = true;
    FERRY_WARN(
        "NET/%s: registering %llu bytes of device memory (link %zu) failed: %s; this %s "
        "connection stages through host memory from now on",
        links_[k]->engine->name(), static_cast<unsigned long long>(a.size), k, statusString(s),
        isSend_ ? "send" : "receive");
    return false;
  }
  FERRY_INFO(kLogNet | kLogAlloc,
             "NET/%s: %s connection registered device allocation %llu (%llu "
             "bytes) for direct transfers (%zu of %d)",
             links_[0]->engine->name(), isSend_ ? "send" : "receive",
             static_cast<unsigned long long>(a.allocId), static_cast<unsigned long long>(a.size),
             direct_.size() + 1, kMaxDirectRegions);
  direct_.push_back(d);
  *mhandles = d.mhandles;
  return true;
}

Status NetBuffers::allocate(uint64_t bytes, Region* out) {
  FERRY_CHECK(runtime_->allocHost(bytes, &out->mem));
  for (size_t k = 0; k < links_.size(); ++k) {
    Status s = links_[k]->regMr(out->mem->ptr(), bytes, &out->mhandles[k]);
    if (ok(s)) continue;
    deregister(out->mhandles);
    out->mem.reset();
    FERRY_FAIL(s,
               "NET/%s: registering %llu bytes of host memory for a %s connection (link %zu) "
               "failed: %s",
               links_[k]->engine->name(), static_cast<unsigned long long>(bytes),
               isSend_ ? "send" : "receive", k, statusString(s));
  }
  return ncclSuccess;
}

bool NetBuffers::waitSent(uint64_t target, int64_t ns, bool whileMoving,
                          const std::atomic<bool>* abort) const {
  // `taken` only tells progress (no data depends on it): any load will do.
  uint64_t seen = words_->taken.load();
  const int64_t start = steadyNowNs();
  int64_t deadline = start + ns;
  // Acquire (the load): the engine is done with the block once `sent`
  // passed its message.
  while (words_->sent.load() < target) {
    if (abort != nullptr && abort->load(std::memory_order_acquire)) return false;
    const uint64_t now = words_->taken.load();
    const int64_t t = steadyNowNs();
    if (whileMoving && now != seen) {  // the network took a chunk: it moves, keep waiting
      seen = now;
      deadline = t + ns;
    } else if (t > deadline) {
      return false;
    }
    // A wait can last as long as a large message takes to cross: spin for
    // the first millisecond, then nap, so the calling thread does not burn a
    // core for tens of milliseconds.
    if (t - start < 1000000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return true;
}

uint64_t NetBuffers::blockSizeFor(uint64_t bytes) {
  // Powers of two from 1 MiB to 64 MiB, then multiples of 64 MiB (plus a
  // line for the trailer a message of exactly such a size adds): sizes
  // recur, so blocks get reused, and a huge message does not double its
  // pinned memory.
  constexpr uint64_t kStep = uint64_t{64} << 20;
  uint64_t size = uint64_t{1} << 20;
  while (size < kStep && size + 64 < bytes) size <<= 1;
  if (size + 64 < bytes) size = (bytes - 64 + kStep - 1) / kStep * kStep;
  return size + 64;
}

Status NetBuffers::take(uint64_t bytes, uint64_t seq, const SendWait& wait, char** data,
                        NetMhandles* mhandles, uint64_t* size, uint64_t* reuseAfter) {
  *reuseAfter = 0;
  // Acquire: the network (send) or the copy stream (receive) is done with
  // a block once the word says so.
  const uint64_t done = isSend_ ? words_->sent.load() : words_->drained.load();
  Region* best = nullptr;
  Region* firstToFree = nullptr;  // among the busy blocks that fit
  int fitting = 0;
  for (Region& b : blocks_) {
    if (b.mem->size() < bytes) continue;
    ++fitting;
    if (b.busyUntil > done) {
      if (firstToFree == nullptr || b.busyUntil < firstToFree->busyUntil) firstToFree = &b;
      continue;
    }
    if (best == nullptr || b.mem->size() < best->mem->size()) best = &b;
  }
  if (best == nullptr && !isSend_ && fitting >= kRecvBlocksPerSize) {
    // Messages of a connection drain in order, so the block's last user
    // drains before this message's copies begin; the proxy waits for that
    // (NetOp::reuseAfter) before landing chunks in it. No stream waits.
    best = firstToFree;
    *reuseAfter = best->busyUntil;
  }
  // Only a block whose message the proxy has can be waited for: the
  // network alone frees it.
  const bool canWait = isSend_ && firstToFree != nullptr && firstToFree->busyUntil <= wait.posted;
  if (best == nullptr && canWait && fitting >= kSendBlocksPerSize && wait.ns > 0 &&
      waitSent(firstToFree->busyUntil, wait.ns, true, wait.abort)) {
    best = firstToFree;
  }
  const uint64_t newSize = blockSizeFor(bytes);
  if (best == nullptr && canWait && newSize > wait.capRoom && wait.capWaitNs > 0 &&
      waitSent(firstToFree->busyUntil, wait.capWaitNs, false, wait.abort)) {
    best = firstToFree;
  }
  if (best == nullptr) {
    Region r;
    FERRY_CHECK(allocate(newSize, &r));
    stagingBytes_ += newSize;
    FERRY_INFO(kLogNet | kLogAlloc, "NET/%s: %s staging grew by %llu bytes to %llu",
               links_[0]->engine->name(), isSend_ ? "send" : "receive",
               static_cast<unsigned long long>(newSize),
               static_cast<unsigned long long>(stagingBytes_));
    blocks_.push_back(std::move(r));
    best = &blocks_.back();
  }
  best->busyUntil = seq + 1;
  *data = static_cast<char*>(best->mem->ptr());
  *mhandles = best->mhandles;
  *size = best->mem->size();
  return ncclSuccess;
}

}  // namespace ferry
