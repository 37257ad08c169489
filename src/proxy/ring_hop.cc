#include "proxy/ring_hop.h"

#include <atomic>

namespace ferry {
namespace {

// The proxy keeps at most this many requests of one hop in flight (bounded
// by the FIFO's slots anyway).
constexpr size_t kMaxHopRequests = 64;

uint64_t loadAcquire(const uint64_t* p) {
  return std::atomic_ref<const uint64_t>(*p).load(std::memory_order_acquire);
}

void storeRelease(uint64_t* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release);
}

}  // namespace

std::string RingHop::describe() const {
  return std::string(isSend ? "ring send to" : "ring receive from") + " rank " +
         std::to_string(peer) + " (channel " + std::to_string(channel) + ")";
}

bool RingHop::flushed() const {
  return failed || !isSend || done >= loadAcquire(kernelWord);
}

// An engine error. A send hop with filled slots not yet delivered lost
// data: that fails the communicator. Otherwise (a receive hop's posted-ahead
// slots, an idle send hop) it is the peer leaving: after its last
// collective a peer destroys its communicator and its end closes. A peer
// that died is the liveness ring's to report (comm/liveness.h).
Status RingHop::stop(Status s, const char* what) {
  failed = true;
  const bool lost = isSend && done < loadAcquire(kernelWord);
  if (!lost) {
    FERRY_INFO(kLogNet | kLogColl, "NET/%s: %s stopped at step %llu (%s: %s): the peer left",
               link->engine->name(), describe().c_str(), static_cast<unsigned long long>(done),
               what, statusString(s));
    return ncclSuccess;
  }
  FERRY_FAIL(ncclRemoteError, "NET/%s: %s failed at step %llu (%s): %s", link->engine->name(),
             describe().c_str(), static_cast<unsigned long long>(done), what, statusString(s));
}

// The bytes step k's slot carries: what the kernel wrote there (read after
// the acquire of its tail, which its size store precedes), or the whole
// slot where the kernel reports no sizes. A size outside 1..slotBytes
// (never written by a correct kernel) ships the whole slot.
uint64_t RingHop::sendBytes(uint64_t k) const {
  if (sizes == nullptr) return slotBytes;
  // Relaxed: ordered by the acquire of kernelWord that let step k post.
  const uint64_t n =
      std::atomic_ref<const uint64_t>(sizes[k % nslots]).load(std::memory_order_relaxed);
  return n == 0 || n > slotBytes ? slotBytes : n;
}

Status RingHop::step(bool* moved) {
  if (failed) return ncclSuccess;
  NetLink& l = *link;
  // Completions, in order (an engine completes a comm's requests in order).
  while (!requests.empty()) {
    int finished = 0;
    size_t size = 0;
    Status s = l.engine->test(requests.front(), &finished, &size);
    if (!ok(s)) return stop(s, "test");
    if (!finished) break;
    if (!isSend && (size == 0 || size > slotBytes)) {
      failed = true;
      FERRY_FAIL(ncclRemoteError, "NET/%s: %s: step %llu carried %zu bytes, expected 1..%llu",
                 l.engine->name(), describe().c_str(), static_cast<unsigned long long>(done), size,
                 static_cast<unsigned long long>(slotBytes));
    }
    requests.pop_front();
    ++done;
    // Release: the slot's bytes (received, or taken by the engine) before
    // the count the kernel waits on.
    storeRelease(proxyWord, done);
    *moved = true;
  }
  // Postings: a send once the kernel filled the slot; a receive once the
  // kernel drained the slot's previous use.
  const uint64_t limit =
      isSend ? loadAcquire(kernelWord) : loadAcquire(kernelWord) + static_cast<uint64_t>(nslots);
  while (posted < limit && requests.size() < kMaxHopRequests) {
    char* slot = fifo + (posted % nslots) * slotBytes;
    void* request = nullptr;
    Status s;
    if (isSend) {
      s = l.engine->isend(l.comm, slot, sendBytes(posted), 0, mhandle, &request);
    } else {
      void* at = slot;
      size_t want = slotBytes;
      int tag = 0;
      s = l.engine->irecv(l.comm, 1, &at, &want, &tag, &mhandle, &request);
    }
    if (!ok(s)) return stop(s, isSend ? "isend" : "irecv");
    if (request == nullptr) break;  // the engine says "not now"
    requests.push_back(request);
    ++posted;
    *moved = true;
  }
  return ncclSuccess;
}

}  // namespace ferry
