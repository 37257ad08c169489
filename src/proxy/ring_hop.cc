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

// LL receive: step k's lines, landed whole in `landing`, into the FIFO
// slot. One relaxed 8-byte store per word: each word holds its own flag,
// so the kernel accepts a word only once all of its bytes are there.
void RingHop::landLines(uint64_t k, size_t bytes) const {
  const uint64_t slot = (k % nslots) * slotBytes;
  const uint64_t* from = landing.get() + slot / sizeof(uint64_t);
  auto* to = reinterpret_cast<uint64_t*>(fifo + slot);
  for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) {
    std::atomic_ref<uint64_t>(to[i]).store(from[i], std::memory_order_relaxed);
  }
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
    const bool lines = landing != nullptr;  // LL: whole 16-byte lines only
    if (!isSend && (size == 0 || size > slotBytes || (lines && size % 16 != 0))) {
      failed = true;
      FERRY_FAIL(ncclRemoteError, "NET/%s: %s: step %llu carried %zu bytes, expected 1..%llu%s",
                 l.engine->name(), describe().c_str(), static_cast<unsigned long long>(done), size,
                 static_cast<unsigned long long>(slotBytes), lines ? " in 16-byte LL lines" : "");
    }
    requests.pop_front();
    if (lines) landLines(done, size);
    ++done;
    // Release: the slot's bytes (received, or taken by the engine) before
    // the count the kernel waits on.
    if (proxyWord != nullptr) storeRelease(proxyWord, done);
    *moved = true;
  }
  // Postings: a send once the kernel filled the slot; a receive once the
  // kernel drained the slot's previous use.
  const uint64_t limit =
      isSend ? loadAcquire(kernelWord) : loadAcquire(kernelWord) + static_cast<uint64_t>(nslots);
  while (posted < limit && requests.size() < kMaxHopRequests) {
    char* slot = (landing != nullptr ? reinterpret_cast<char*>(landing.get()) : fifo) +
                 (posted % nslots) * slotBytes;
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
