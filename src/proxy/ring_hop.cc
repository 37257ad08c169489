#include "proxy/ring_hop.h"

#include <algorithm>
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

bool RingHop::streams() const {
  return groupSlots > 1 && landing == nullptr && link->engine->canStream();
}

char* RingHop::slotAt(uint64_t k) const {
  char* base = landing != nullptr ? reinterpret_cast<char*>(landing.get()) : fifo;
  return base + (k % nslots) * slotBytes;
}

// The slots a message starting at step k may span: groupSlots, but never
// across the end of the FIFO (a message is one contiguous buffer); one where
// the hop does not stream. Both ends of a hop cut alike: a receive posts
// this much room, the sender's message is never longer.
uint64_t RingHop::roomAt(uint64_t k) const {
  if (!streams()) return 1;
  const uint64_t toWrap = nslots - k % nslots;
  return std::min<uint64_t>(groupSlots, toWrap);
}

// Step k's message: the bytes left in the kernel's primitive from slot k
// (its size word, read after the acquire of the tail that let step k post,
// which the kernel's store precedes), cut at roomAt(k). A word outside 1..(the cut) (never
// written by a correct kernel: 0 before the first launch) ships the
// whole cut.
void RingHop::sendGroup(uint64_t k, uint64_t* steps, uint64_t* bytes) const {
  const uint64_t cut = roomAt(k) * slotBytes;
  uint64_t n = cut;
  if (sizes != nullptr) {
    // Relaxed: ordered by the acquire of kernelWord that let step k post.
    n = std::atomic_ref<const uint64_t>(sizes[k % nslots]).load(std::memory_order_relaxed);
    if (n == 0 || n > cut) n = cut;
  }
  *bytes = n;
  *steps = (n + slotBytes - 1) / slotBytes;
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

// The kernel's count (sendHead / recvTail) reaches `steps`.
void RingHop::publish(uint64_t steps, bool* moved) {
  if (steps <= done) return;
  done = steps;
  // Release: the slots' bytes (received, or taken by the engine) before the
  // count the kernel waits on.
  if (proxyWord != nullptr) storeRelease(proxyWord, done);
  *moved = true;
}

// A finished request: a receive checks what arrived and lands LL lines.
Status RingHop::finishOne(const Pending& p, size_t size, bool* moved) {
  NetLink& l = *link;
  const bool lines = landing != nullptr;  // LL: whole 16-byte lines only
  if (!isSend && (size == 0 || size > p.bytes || (lines && size % 16 != 0))) {
    failed = true;
    FERRY_FAIL(ncclRemoteError, "NET/%s: %s: step %llu carried %zu bytes, expected 1..%llu%s",
               l.engine->name(), describe().c_str(), static_cast<unsigned long long>(p.start), size,
               static_cast<unsigned long long>(p.bytes), lines ? " in 16-byte LL lines" : "");
  }
  if (lines) landLines(p.start, size);
  uint64_t steps = p.steps;
  if (!isSend) {
    steps = (size + slotBytes - 1) / slotBytes;
    // A streamed message may fill less than the room posted (the one
    // receive in flight): the next starts right after it.
    if (streams()) posted = p.start + steps;
  }
  publish(p.start + steps, moved);
  return ncclSuccess;
}

// Completions, in order (an engine completes a comm's requests in order).
Status RingHop::complete(bool* moved) {
  NetLink& l = *link;
  while (!requests.empty()) {
    int finished = 0;
    size_t size = 0;
    Status s = l.engine->test(requests.front().request, &finished, &size);
    if (!ok(s)) return stop(s, "test");
    if (!finished) break;
    const Pending p = requests.front();
    requests.pop_front();
    FERRY_CHECK(finishOne(p, size, moved));
  }
  return ncclSuccess;
}

// Sends: raise the open message's ready mark, then open messages for filled
// steps. A streamed message must be all ready before the next one opens
// (the engine sends a connection's messages in order).
Status RingHop::postSends(bool* moved) {
  NetLink& l = *link;
  const uint64_t filled = loadAcquire(kernelWord);
  if (!requests.empty() && requests.back().ready < requests.back().bytes) {
    Pending& p = requests.back();
    const uint64_t upTo = std::min(filled, p.start + p.steps);
    const uint64_t ready = std::min(p.bytes, (upTo - p.start) * slotBytes);
    if (ready > p.ready) {
      Status s = l.engine->sendReady(p.request, ready);
      if (!ok(s)) return stop(s, "sendReady");
      p.ready = ready;
      *moved = true;
    }
    if (p.ready < p.bytes) return ncclSuccess;
  }
  while (posted < filled && requests.size() < kMaxHopRequests) {
    Pending p;
    p.start = posted;
    sendGroup(posted, &p.steps, &p.bytes);
    p.ready = std::min(p.bytes, (std::min(filled, p.start + p.steps) - p.start) * slotBytes);
    Status s;
    if (p.steps > 1) {
      s = l.engine->isendStream(l.comm, slotAt(p.start), p.bytes, p.ready, slotBytes, mhandle,
                                &p.request);
    } else {
      s = l.engine->isend(l.comm, slotAt(p.start), p.bytes, 0, mhandle, &p.request);
    }
    if (!ok(s)) return stop(s, "isend");
    if (p.request == nullptr) break;  // the engine says "not now"
    requests.push_back(p);
    posted += p.steps;
    *moved = true;
    if (p.ready < p.bytes) break;
  }
  return ncclSuccess;
}

// Receives into slots the kernel drained. Streamed: one at a time, of
// roomAt's slots (the sender's message is never longer), since where the
// next message starts depends on this one's size.
Status RingHop::postRecvs(bool* moved) {
  NetLink& l = *link;
  const bool stream = streams();
  const uint64_t limit = loadAcquire(kernelWord) + static_cast<uint64_t>(nslots);
  while (requests.size() < (stream ? 1 : kMaxHopRequests)) {
    Pending p;
    p.start = posted;
    p.steps = roomAt(posted);
    if (posted + p.steps > limit) break;  // the kernel still reads some of the room
    p.bytes = p.steps * slotBytes;
    void* at = slotAt(p.start);
    size_t want = p.bytes;
    int tag = 0;
    Status s = l.engine->irecv(l.comm, 1, &at, &want, &tag, &mhandle, &p.request);
    if (!ok(s)) return stop(s, "irecv");
    if (p.request == nullptr) break;  // the engine says "not now"
    requests.push_back(p);
    posted += p.steps;
    *moved = true;
  }
  return ncclSuccess;
}

// A streamed receive in flight: publish the slots wholly inside the
// received prefix (a message's slots are full but for its last, which
// counts at completion).
Status RingHop::publishPrefix(bool* moved) {
  if (requests.empty()) return ncclSuccess;
  const Pending& p = requests.front();
  size_t bytes = 0;
  Status s = link->engine->recvPrefix(p.request, &bytes);
  if (!ok(s)) return stop(s, "recvPrefix");
  const uint64_t full = std::min<uint64_t>(bytes / slotBytes, p.steps);
  publish(p.start + full, moved);
  return ncclSuccess;
}

Status RingHop::step(bool* moved) {
  if (failed) return ncclSuccess;
  FERRY_CHECK(complete(moved));
  if (failed) return ncclSuccess;
  if (isSend) return postSends(moved);
  if (streams()) FERRY_CHECK(publishPrefix(moved));
  if (failed) return ncclSuccess;
  return postRecvs(moved);
}

}  // namespace ferry
