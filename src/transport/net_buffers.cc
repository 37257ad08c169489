#include "transport/net_buffers.h"

#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "core/clock.h"

namespace ferry {

NetBuffers::~NetBuffers() {
  // Deregistered before the links close their comms (the connection
  // destroys its buffers first); the pool's memory goes after every
  // connection's registrations (it outlives them).
  for (Registration& r : registrations_) deregister(r.mhandles);
  for (DirectRegion& d : direct_) deregister(d.mhandles);
  pool_->release(this);
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

Status NetBuffers::pinBlock(uint64_t bytes, Block** out) {
  FERRY_CHECK(pool_->pin(bytes, out));
  stagingBytes_ += bytes;
  FERRY_INFO(kLogNet | kLogAlloc,
             "NET/%s: %s staging grew by %llu bytes to %llu (the communicator's network staging "
             "%llu bytes in %zu blocks)",
             links_[0]->engine->name(), isSend_ ? "send" : "receive",
             static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(stagingBytes_),
             static_cast<unsigned long long>(pool_->bytes()), pool_->blocks().size());
  return ncclSuccess;
}

const NetBuffers::Registration* NetBuffers::findRegistration(const Block& b) const {
  for (const Registration& r : registrations_) {
    if (r.block == &b) return &r;
  }
  return nullptr;
}

Status NetBuffers::registration(const Block& b, NetMhandles* out) {
  if (const Registration* known = findRegistration(b)) {
    *out = known->mhandles;
    return ncclSuccess;
  }
  Registration r;
  r.block = &b;
  for (size_t k = 0; k < links_.size(); ++k) {
    Status s = links_[k]->regMr(b.mem->ptr(), b.mem->size(), &r.mhandles[k]);
    if (ok(s)) continue;
    r.mhandles[k] = nullptr;
    deregister(r.mhandles);
    FERRY_FAIL(s,
               "NET/%s: registering %zu bytes of host memory for a %s connection (link %zu) "
               "failed: %s",
               links_[k]->engine->name(), b.mem->size(), isSend_ ? "send" : "receive", k,
               statusString(s));
  }
  registrations_.push_back(r);
  *out = r.mhandles;
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
  const uint64_t mine = done();
  Block* best = nullptr;
  bool bestRegistered = false;
  Block* firstToFree = nullptr;  // among this connection's busy blocks that fit
  int fitting = 0;               // this connection's blocks that fit, busy or not
  for (const auto& owned : pool_->blocks()) {
    Block& b = *owned;
    if (b.mem->size() < bytes) continue;
    if (b.user == this) {
      ++fitting;
      if (b.busyUntil > mine) {
        if (firstToFree == nullptr || b.busyUntil < firstToFree->busyUntil) firstToFree = &b;
        continue;
      }
    } else if (b.user != nullptr && (b.busyUntil > b.user->done() || b.user->released())) {
      continue;  // another connection's message still uses it, or may (it failed)
    }
    // Smallest first; among equals, one this connection registered already.
    const bool reg = b.user == this || findRegistration(b) != nullptr;
    if (best == nullptr || b.mem->size() < best->mem->size() ||
        (b.mem->size() == best->mem->size() && reg && !bestRegistered)) {
      best = &b;
      bestRegistered = reg;
    }
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
  if (best == nullptr) FERRY_CHECK(pinBlock(newSize, &best));
  FERRY_CHECK(registration(*best, mhandles));
  best->user = this;
  best->busyUntil = seq + 1;
  *data = static_cast<char*>(best->mem->ptr());
  *size = best->mem->size();
  return ncclSuccess;
}

}  // namespace ferry
