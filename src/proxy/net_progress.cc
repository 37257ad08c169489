#include "proxy/net_progress.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"

namespace ferry {
namespace {

// Requests one link keeps pending at most (the engine may accept fewer: a
// null request means "not now"). Done requests waiting to retire behind a
// slower link do not count.
constexpr size_t kMaxPendingPerLink = 8;

const char* direction(const ConnectionBase& c) {
  return c.isSend ? "send to" : "receive from";
}

// The link that carries connection-wide chunk `chunk`.
NetLink& linkOf(const ConnectionBase& c, uint64_t chunk) {
  return *c.net[chunk % c.net.size()];
}

// An engine error: the caller's mistake stays what it is (a truncated
// receive is ncclInvalidUsage); anything else means the peer or the
// network failed.
Status peerFailure(Status s) {
  return s == ncclInvalidUsage || s == ncclInvalidArgument ? s : ncclRemoteError;
}

// A chunk of a receive landed with `size` bytes: every chunk but the last
// is a full one; the last is the rest plus the trailer, which must name
// this receive's size.
Status checkArrival(const ConnectionBase& conn, const NetOp& op, uint64_t chunk, size_t size) {
  const uint64_t k = chunk - op.firstChunk;
  uint64_t sentBytes = 0;
  bool match = size == op.wireSize(k);
  if (match && op.last(k)) {
    uint64_t trailer = 0;
    memcpy(&trailer, op.chunkAt(k) + op.chunkSize(k), sizeof(trailer));
    sentBytes = trailer ^ kNetTrailerMagic;
    match = sentBytes == op.bytes;
  }
  if (match) return ncclSuccess;
  char sent[64] = "a different size";
  if (sentBytes != 0) {
    snprintf(sent, sizeof(sent), "%llu bytes", static_cast<unsigned long long>(sentBytes));
  }
  FERRY_FAIL(ncclInvalidUsage,
             "receive from peer %d of %llu bytes (message %llu) does not match the peer's send "
             "(%s; chunk %llu came with %zu bytes): sizes must be equal",
             conn.peer, static_cast<unsigned long long>(op.bytes),
             static_cast<unsigned long long>(op.seq), sent, static_cast<unsigned long long>(k),
             size);
}

}  // namespace

void NetProgress::add(NetOp op) {
  ConnState* state = nullptr;
  for (auto& c : conns_) {
    if (c->conn == op.conn) state = c.get();
  }
  if (state == nullptr) {
    conns_.push_back(std::make_unique<ConnState>());
    state = conns_.back().get();
    state->conn = op.conn;
    // A connection's state lives while it has messages; a new one starts at
    // the first chunk not yet handled (every earlier chunk retired), and
    // link l's first chunk is the first one from there that it carries.
    const uint64_t nLinks = op.conn->net.size();
    state->base = op.firstChunk;
    state->links.resize(nLinks);
    for (uint64_t l = 0; l < nLinks; ++l) {
      state->links[l].next = op.firstChunk + (l + nLinks - op.firstChunk % nLinks) % nLinks;
    }
  }
  state->ops.push_back(op);
  // A connection that failed after the user's thread checked it: the op
  // fails at once (its words are released already; fail() repeats that).
  Status failed = op.conn->failed.load();
  if (failed != ncclSuccess) fail(*state, failed, true);
}

NetOp* NetProgress::opOf(ConnState& c, uint64_t chunk) {
  for (NetOp& op : c.ops) {
    if (chunk < op.firstChunk + op.chunks()) return &op;
  }
  return nullptr;
}

// Tests each link's pending requests, oldest first, until one is not done:
// a comm completes its requests in order, so the ones behind it wait for
// the next pass (and an engine may progress a comm only while it is
// tested). A link's pending requests are its last `pending` posted chunks.
Status NetProgress::testLinks(ConnState& c, bool* moved) {
  const ConnectionBase& conn = *c.conn;
  const uint64_t nLinks = c.links.size();
  for (size_t l = 0; l < nLinks; ++l) {
    LinkState& ls = c.links[l];
    NetLink& link = *conn.net[l];
    while (ls.pending > 0) {
      InFlight& f = c.requests[ls.next - ls.pending * nLinks - c.base];
      int done = 0;
      Status s = link.engine->test(f.request, &done, &f.size);
      if (!ok(s)) return testFailed(c, f, s);
      if (!done) break;
      f.done = true;
      --ls.pending;
      *moved = true;
      FERRY_TRACE(kLogNet | kLogProxy, "t=%lld us: %s peer %d: chunk %llu done (link %zu)",
                  traceNowUs(), direction(conn), conn.peer,
                  static_cast<unsigned long long>(f.chunk), l);
    }
  }
  return ncclSuccess;
}

// An engine's test of chunk f failed: the error, logged.
Status NetProgress::testFailed(ConnState& c, const InFlight& f, Status s) {
  const ConnectionBase& conn = *c.conn;
  const NetOp& op = *opOf(c, f.chunk);  // posted, not retired: its op is still here
  if (s == ncclInvalidUsage && !conn.isSend) {
    // The engine's own truncation check: more bytes came than fit.
    FERRY_FAIL(ncclInvalidUsage,
               "receive from peer %d of %llu bytes (message %llu) does not match the peer's "
               "send (a larger one: chunk %llu did not fit): sizes must be equal",
               conn.peer, static_cast<unsigned long long>(op.bytes),
               static_cast<unsigned long long>(op.seq),
               static_cast<unsigned long long>(f.chunk - op.firstChunk));
  }
  FERRY_WARN("NET/%s: %s peer %d failed (message %llu, chunk %llu): %s",
             linkOf(conn, f.chunk).engine->name(), direction(conn), conn.peer,
             static_cast<unsigned long long>(op.seq),
             static_cast<unsigned long long>(f.chunk - op.firstChunk), statusString(s));
  return peerFailure(s);
}

// A done chunk at the front: its counters move and, with its message's
// last chunk, the message leaves.
Status NetProgress::retire(ConnState& c, const InFlight& f, int64_t nowNs) {
  NetWords& words = c.conn->netBuffers->words();
  NetOp& op = c.ops.front();
  if (!c.conn->isSend) {
    FERRY_CHECK(checkArrival(*c.conn, op, f.chunk, f.size));
    // The last chunk (staged) retires after every direct one.
    if (op.direct != nullptr && op.last(f.chunk - op.firstChunk)) FERRY_CHECK(flushDirect(c, op));
    // Release: the chunk's bytes are in the block before a stream that
    // acquires `arrived` copies them out.
    words.arrived.store(f.chunk + 1);
  } else {
    // Progress only (the staging wait's, NetBuffers::waitSent).
    words.taken.store(f.chunk + 1);
  }
  if (++op.done < op.chunks()) return ncclSuccess;
  // Release: the engine is done with the staging block; the user's thread
  // (acquire) may reuse it.
  if (c.conn->isSend) words.sent.store(op.seq + 1);
  noteMessage(c, op, nowNs);
  finished_(op);
  c.ops.pop_front();
  return ncclSuccess;
}

// An engine that wrote into GPU memory may need a flush (a read through
// the same path) before the GPU sees every byte: per link, one iflush of
// the last direct chunk it carried orders the ones before it. Waited for
// here (a flush is one small read), bounded by FERRY_P2P_TIMEOUT.
Status NetProgress::flushDirect(ConnState& c, const NetOp& op) {
  const uint64_t nLinks = c.links.size();
  const uint64_t last = op.chunks() - 2;  // the last direct chunk
  for (uint64_t l = 0; l < nLinks; ++l) {
    // The largest k <= last whose connection-wide chunk goes on link l.
    const uint64_t back = (op.firstChunk + last + nLinks - l) % nLinks;
    if (back > last) continue;
    const uint64_t k = last - back;
    NetLink& link = *c.conn->net[l];
    void* data = op.chunkAt(k);
    int size = static_cast<int>(op.chunkSize(k));
    void* mhandle = op.directMh[l];
    void* request = nullptr;
    Status s = link.engine->iflush(link.comm, 1, &data, &size, &mhandle, &request);
    const int64_t start = steadyNowNs();
    for (int done = 0; ok(s) && request != nullptr && !done;) {
      size_t sizes[1] = {0};
      s = link.engine->test(request, &done, sizes);
      if (ok(s) && !done && op.timeoutNs > 0 && steadyNowNs() - start > op.timeoutNs) {
        s = ncclSystemError;
      }
    }
    if (!ok(s)) {
      FERRY_WARN("NET/%s: flushing a receive from peer %d (message %llu, link %llu) failed: %s",
                 link.engine->name(), c.conn->peer, static_cast<unsigned long long>(op.seq),
                 static_cast<unsigned long long>(l), statusString(s));
      return peerFailure(s);
    }
  }
  return ncclSuccess;
}

// Chunks retire in chunk order (the counters are monotonic): the done
// prefix of the requests.
Status NetProgress::testRequests(ConnState& c, int64_t nowNs, bool* moved) {
  FERRY_CHECK(testLinks(c, moved));
  while (!c.requests.empty() && c.requests.front().done) {
    const InFlight f = c.requests.front();
    c.requests.pop_front();
    ++c.base;
    FERRY_CHECK(retire(c, f, nowNs));
  }
  return ncclSuccess;
}

// Where a message's time went, as the proxy saw it: from taking the op to
// posting its first chunk (a send waits for its staging copy, which waits
// for the user's stream; a receive for its block or window), from there to
// its last chunk done (the network), and the gap between the previous
// message's end and this one's first chunk (whatever its cause: the user's
// pace, or the turnaround through the streams when each message waits for
// the one before, as in a loop of exchanges).
void NetProgress::noteMessage(ConnState& c, const NetOp& op, int64_t nowNs) {
  NetStats& st = c.conn->netStats;
  const int64_t first = op.firstPostNs >= 0 ? op.firstPostNs : nowNs;
  const auto add = [](std::atomic<uint64_t>& to, int64_t ns) {
    // Relaxed: statistics, read at destroy.
    if (ns > 0) to.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  };
  st.messages.fetch_add(1, std::memory_order_relaxed);
  add(st.firstOutNs, first - op.postedNs);
  add(st.wireNs, nowNs - first);
  // The connection's state may have been dropped while it had no message:
  // the previous end lives in its NetStats.
  const int64_t lastDone = st.lastDoneNs.load(std::memory_order_relaxed);
  if (lastDone >= 0) add(st.gapNs, first - lastDone);
  st.lastDoneNs.store(nowNs, std::memory_order_relaxed);
}

Status NetProgress::postChunks(ConnState& c, int64_t nowNs, bool* moved) {
  for (size_t l = 0; l < c.links.size(); ++l) {
    NetStop why = NetStop::Window;
    FERRY_CHECK(postLink(c, l, nowNs, moved, &why));
    noteStop(c, c.links[l], why, nowNs);
  }
  return ncclSuccess;
}

void NetProgress::chargeStop(ConnState& c, const LinkState& ls, int64_t nowNs) {
  if (ls.since < 0 || nowNs <= ls.since) return;
  // Relaxed: statistics, read at destroy (P2pEngine::describeCounters).
  c.conn->netStats.stopNs[static_cast<size_t>(ls.stop)].fetch_add(
      static_cast<uint64_t>(nowNs - ls.since), std::memory_order_relaxed);
}

void NetProgress::noteStop(ConnState& c, LinkState& ls, NetStop why, int64_t nowNs) {
  if (ls.since >= 0 && why == ls.stop) return;
  chargeStop(c, ls, nowNs);
  ls.stop = why;
  ls.since = nowNs;
}

void NetProgress::closeStops(ConnState& c, int64_t nowNs) {
  for (const LinkState& ls : c.links) chargeStop(c, ls, nowNs);
}

// Posts link l's chunks in its order while its window has room and their
// messages allow: a send's chunk once staged, a receive's once its block
// is free.
Status NetProgress::postLink(ConnState& c, size_t l, int64_t nowNs, bool* moved, NetStop* why) {
  NetWords& words = c.conn->netBuffers->words();
  NetStats& stats = c.conn->netStats;
  LinkState& ls = c.links[l];
  NetLink& link = *c.conn->net[l];
  *why = NetStop::Window;
  while (ls.pending < kMaxPendingPerLink) {
    const uint64_t chunk = ls.next;
    NetOp* op = opOf(c, chunk);
    *why = NetStop::NoMessage;
    if (op == nullptr) return ncclSuccess;  // no posted message has it yet
    const uint64_t k = chunk - op->firstChunk;
    void* at = op->chunkAt(k);
    void* mhandle = op->mhandleOf(k, l);
    void* request = nullptr;
    Status s;
    uint64_t ahead = 0;
    if (c.conn->isSend) {
      // Acquire: pairs with the copy stream's write after the staging copy.
      const uint64_t filled = words.filled.load();
      *why = NetStop::Unstaged;
      if (filled < chunk + 1) return ncclSuccess;
      ahead = filled - chunk;
      s = link.engine->isend(link.comm, at, op->wireSize(k), 0, mhandle, &request);
    } else {
      // Acquire: pairs with the copy stream's write of `drained` after its
      // copies out of this (reused) block; only then may chunks land in it.
      *why = NetStop::BlockBusy;
      if (op->reuseAfter > words.drained.load()) return ncclSuccess;
      // Acquire: pairs with the copy stream's write of `ready` once the
      // user's stream reached the receive; before it, the user's buffer
      // may still be in use.
      *why = NetStop::NotReady;
      if (op->directChunk(k) && words.ready.load() <= op->seq) return ncclSuccess;
      // Room for a full chunk and a trailer (inside the block): a send of
      // another size then lands whole, and checkArrival names the
      // difference; a chunk of the right size never touches its neighbour.
      // A direct chunk gets exactly its share of the user's buffer: a
      // larger one fails in the engine (a truncation, named as a size
      // mismatch by testFailed).
      const uint64_t blockAt = static_cast<uint64_t>(static_cast<char*>(at) - op->data);
      size_t want = op->directChunk(k)
                        ? op->chunkBytes
                        : std::min(op->chunkBytes + kNetTrailerBytes, op->blockBytes - blockAt);
      int tag = 0;
      s = link.engine->irecv(link.comm, 1, &at, &want, &tag, &mhandle, &request);
    }
    if (!ok(s)) {
      FERRY_WARN("NET/%s: %s peer %d: posting chunk %llu of message %llu failed: %s",
                 link.engine->name(), direction(*c.conn), c.conn->peer,
                 static_cast<unsigned long long>(k), static_cast<unsigned long long>(op->seq),
                 statusString(s));
      return peerFailure(s);
    }
    *why = NetStop::Engine;
    if (request == nullptr) return ncclSuccess;  // the engine says "not now"
    if (op->firstPostNs < 0) op->firstPostNs = nowNs;
    // Relaxed: statistics (NetStats).
    stats.posts.fetch_add(1, std::memory_order_relaxed);
    stats.aheadSum.fetch_add(ahead, std::memory_order_relaxed);
    if (ahead > stats.aheadMax.load(std::memory_order_relaxed)) {
      stats.aheadMax.store(ahead, std::memory_order_relaxed);
    }
    // chunk >= base: every chunk below base was posted and retired. Slots
    // between the highest posted chunk and this one belong to other links.
    const uint64_t slot = chunk - c.base;
    while (c.requests.size() <= slot) {
      c.requests.push_back(InFlight{nullptr, c.base + c.requests.size(), false, 0});
    }
    c.requests[slot].request = request;
    ++ls.pending;
    ls.next += c.links.size();
    FERRY_TRACE(kLogNet | kLogProxy, "t=%lld us: %s peer %d: chunk %llu posted (message %llu)",
                traceNowUs(), direction(*c.conn), c.conn->peer,
                static_cast<unsigned long long>(chunk), static_cast<unsigned long long>(op->seq));
    *moved = true;
    *why = NetStop::Window;
  }
  return ncclSuccess;
}

Status NetProgress::checkTimeout(const ConnState& c, int64_t nowNs) {
  const NetOp& op = c.ops.front();
  if (op.timeoutNs <= 0 || nowNs - op.postedNs <= op.timeoutNs) return ncclSuccess;
  FERRY_FAIL(ncclSystemError,
             "%s peer %d (another host) timed out after %lld s (message %llu, %llu of %llu "
             "chunks done): the peer never posted its side or stopped (FERRY_P2P_TIMEOUT)",
             direction(*c.conn), c.conn->peer, static_cast<long long>(op.timeoutNs / 1000000000),
             static_cast<unsigned long long>(op.seq), static_cast<unsigned long long>(op.done),
             static_cast<unsigned long long>(op.chunks()));
}

bool NetProgress::step(int64_t nowNs) {
  bool moved = false;
  for (size_t i = 0; i < conns_.size();) {
    ConnState& c = *conns_[i];
    // A connection the user's thread failed (its launch broke off).
    Status s = c.conn->failed.load();
    if (ok(s)) s = testRequests(c, nowNs, &moved);
    if (ok(s)) s = postChunks(c, nowNs, &moved);
    if (ok(s) && !c.ops.empty()) s = checkTimeout(c, nowNs);
    // Each cause above has logged its own WARN, the last error users read.
    if (!ok(s)) {
      fail(c, s, false);
      moved = true;
    }
    if (c.ops.empty() && c.requests.empty()) {
      closeStops(c, nowNs);  // idle from here: not charged to any cause
      conns_.erase(conns_.begin() + static_cast<long>(i));
      continue;
    }
    ++i;
  }
  return moved;
}

void NetProgress::fail(ConnState& c, Status s, bool warn) {
  ConnectionBase& conn = *c.conn;
  Status expected = ncclSuccess;
  if (conn.failed.compare_exchange_strong(expected, s) && warn) {
    FERRY_WARN("network connection %s peer %d failed: %s", direction(conn), conn.peer,
               statusString(s));
  }
  // The peer learns it from its own requests on the comms, which now fail;
  // requests in flight die with the comms.
  for (auto& link : conn.net) link->closeComm();
  c.requests.clear();
  for (LinkState& l : c.links) l.pending = 0;
  // Release stores: this rank's copy stream (arrived) and staging reuse
  // (sent) stop waiting; nothing else waits on these words.
  NetWords& words = conn.netBuffers->words();
  if (conn.isSend) {
    words.sent.store(kReleased);
  } else {
    words.arrived.store(kReleased);
  }
  for (NetOp& op : c.ops) {
    Status none = ncclSuccess;
    // Release: a user thread reading the async error (acquire) sees it.
    if (op.asyncError != nullptr) {
      op.asyncError->compare_exchange_strong(none, conn.failed.load(), std::memory_order_release);
    }
    finished_(op);
  }
  c.ops.clear();
}

void NetProgress::dropOwner(const void* owner) {
  for (auto& c : conns_) {
    bool mine = std::any_of(c->ops.begin(), c->ops.end(),
                            [owner](const NetOp& op) { return op.owner == owner; });
    if (mine) fail(*c, ncclRemoteError, true);
  }
}

void NetProgress::dropAll() {
  for (auto& c : conns_) fail(*c, ncclRemoteError, true);
  conns_.clear();
}

}  // namespace ferry
