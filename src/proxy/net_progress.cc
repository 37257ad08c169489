#include "proxy/net_progress.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"

namespace ferry {
namespace {

// Requests one connection keeps in flight at most (the engine may accept
// fewer: a null request means "not now").
constexpr size_t kMaxInFlight = 8;

const char* direction(const ConnectionBase& c) {
  return c.isSend ? "send to" : "receive from";
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
    memcpy(&trailer, op.data + k * op.chunkBytes + op.chunkSize(k), sizeof(trailer));
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
  }
  state->ops.push_back(op);
  // A connection that failed after the user's thread checked it: the op
  // fails at once (its words are released already; fail() repeats that).
  Status failed = op.conn->failed.load();
  if (failed != ncclSuccess) fail(*state, failed, true);
}

// Chunks complete in chunk order: only the oldest request is tested, and
// the ones behind it wait their turn (the engine completes a comm's
// requests in order anyway).
Status NetProgress::testRequests(ConnState& c, bool* moved) {
  NetLink& link = *c.conn->net;
  NetWords& words = c.conn->netBuffers->words();
  while (!c.requests.empty()) {
    InFlight& f = c.requests.front();
    NetOp& op = c.ops.front();
    int done = 0;
    size_t size = 0;
    Status s = link.engine->test(f.request, &done, &size);
    if (s == ncclInvalidUsage && !c.conn->isSend) {
      // The engine's own truncation check: more bytes came than fit.
      FERRY_FAIL(ncclInvalidUsage,
                 "receive from peer %d of %llu bytes (message %llu) does not match the peer's "
                 "send (a larger one: chunk %llu did not fit): sizes must be equal",
                 c.conn->peer, static_cast<unsigned long long>(op.bytes),
                 static_cast<unsigned long long>(op.seq), static_cast<unsigned long long>(op.done));
    }
    if (!ok(s)) {
      FERRY_WARN("NET/%s: %s peer %d failed (message %llu, chunk %llu): %s", link.engine->name(),
                 direction(*c.conn), c.conn->peer, static_cast<unsigned long long>(op.seq),
                 static_cast<unsigned long long>(op.done), statusString(s));
      return peerFailure(s);
    }
    if (!done) return ncclSuccess;
    *moved = true;
    FERRY_TRACE(kLogNet, "t=%lld us: %s peer %d: chunk %llu done (message %llu)", traceNowUs(),
                direction(*c.conn), c.conn->peer, static_cast<unsigned long long>(f.chunk),
                static_cast<unsigned long long>(op.seq));
    if (!c.conn->isSend) FERRY_CHECK(checkArrival(*c.conn, op, f.chunk, size));
    // Release: the chunk's bytes are in the FIFO before a stream that
    // acquires `arrived` copies them out.
    if (!c.conn->isSend) words.arrived.store(f.chunk + 1);
    c.requests.pop_front();
    if (++op.done < op.chunks()) continue;
    // Release: the engine is done with the staging block; the user's
    // thread (acquire) may reuse it.
    if (c.conn->isSend) words.sent.store(op.seq + 1);
    finished_(op);
    c.ops.pop_front();
    --c.posting;
  }
  return ncclSuccess;
}

Status NetProgress::postChunks(ConnState& c, bool* moved) {
  NetLink& link = *c.conn->net;
  NetWords& words = c.conn->netBuffers->words();
  while (c.posting < c.ops.size() && c.requests.size() < kMaxInFlight) {
    NetOp& op = c.ops[c.posting];
    const uint64_t chunk = op.firstChunk + op.posted;
    void* request = nullptr;
    Status s;
    if (c.conn->isSend) {
      // Acquire: pairs with the copy stream's write after the staging copy.
      if (words.filled.load() < chunk + 1) return ncclSuccess;
      s = link.engine->isend(link.comm, op.data + op.posted * op.chunkBytes, op.wireSize(op.posted),
                             0, op.mhandle, &request);
    } else {
      // Acquire: pairs with the copy stream's write of `drained` after its
      // copies out of this (reused) block; only then may chunks land in it.
      if (op.posted == 0 && op.reuseAfter > words.drained.load()) return ncclSuccess;
      void* at = op.data + op.posted * op.chunkBytes;
      // Room for a full chunk and a trailer (inside the block): a send of
      // another size then lands whole, and checkArrival names the
      // difference; a chunk of the right size never touches its neighbour.
      size_t want =
          std::min(op.chunkBytes + kNetTrailerBytes, op.blockBytes - op.posted * op.chunkBytes);
      int tag = 0;
      s = link.engine->irecv(link.comm, 1, &at, &want, &tag, &op.mhandle, &request);
    }
    if (!ok(s)) {
      FERRY_WARN("NET/%s: %s peer %d: posting chunk %llu of message %llu failed: %s",
                 link.engine->name(), direction(*c.conn), c.conn->peer,
                 static_cast<unsigned long long>(op.posted),
                 static_cast<unsigned long long>(op.seq), statusString(s));
      return peerFailure(s);
    }
    if (request == nullptr) return ncclSuccess;  // the engine says "not now"
    c.requests.push_back(InFlight{request, chunk});
    FERRY_TRACE(kLogNet, "t=%lld us: %s peer %d: chunk %llu posted (message %llu)", traceNowUs(),
                direction(*c.conn), c.conn->peer, static_cast<unsigned long long>(chunk),
                static_cast<unsigned long long>(op.seq));
    // `posting` moves past an op as soon as its last chunk is posted, so
    // it always points at the op that posts next (testRequests keeps it so
    // when it pops completed ops off the front).
    if (++op.posted == op.chunks()) ++c.posting;
    *moved = true;
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
    if (ok(s)) s = testRequests(c, &moved);
    if (ok(s)) s = postChunks(c, &moved);
    if (ok(s) && !c.ops.empty()) s = checkTimeout(c, nowNs);
    // Each cause above has logged its own WARN, the last error users read.
    if (!ok(s)) {
      fail(c, s, false);
      moved = true;
    }
    if (c.ops.empty() && c.requests.empty()) {
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
  // The peer learns it from its own requests on the comm, which now fail;
  // requests in flight die with the comm.
  conn.net->closeComm();
  c.requests.clear();
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
  c.posting = 0;
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
