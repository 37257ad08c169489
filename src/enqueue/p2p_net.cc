// P2pEngine: sends and receives to and from peers on other hosts
// (TransportId::Net). Protocol -- every GPU operation is submitted here, by
// the user's thread inside the call (trap 22's rule); the proxy thread only
// moves bytes between host memory and the network engine and writes host
// words that the streams wait on (proxy/net_progress.h), so no pending
// stream wait is ever released by work submitted later in this process:
//   send of B bytes, message m, chunks [c0, c0 + n) of the connection:
//     the connection's copy stream waits for the user's stream to reach
//     the send (event), copies the bytes into a pinned staging block of the
//     connection in pieces, writing `filled` = last chunk + 1 after each
//     (stream writes are ordered after the copy); the user's stream waits
//     for those copies only (event), never for the network or the peer.
//     The proxy hands each filled chunk to the engine; the block is reused
//     once the engine took all of it (`sent` > m). A send never waits for
//     its receiver, so the lazy-loading hazard of trap 2 cannot arise.
//   receive of B bytes: the proxy lands the chunks in a pinned staging
//     block of the connection (one per message in flight, reused once
//     `drained` passes it). The copy stream waits for the user's stream to
//     reach the receive (its buffer may be written from then on), then per
//     group of chunks (1, 2, 4, ... up to an eighth of the message, so a
//     message of any size is a few dozen stream operations: trap 29) waits
//     until `arrived` covers the group (the proxy writes it from the CPU as
//     chunks land) and copies the group into the user's buffer; after the
//     last, it writes `drained`; the user's stream waits for the last copy
//     (event).
// FERRY_NET_GDR=1, where the engine takes device memory (chooseNetDirect):
// every chunk but the last goes from the user's buffer to the network and
// from the network into the user's buffer (the allocation registered once
// per connection); only the last chunk, which carries the trailer, is
// staged. The send's copy stream marks those chunks filled once the user's
// stream has reached the send, and the user's stream then waits for `sent`
// (the network has taken the whole message: the buffer is the user's
// again). The receive's copy stream writes `ready` once the user's stream
// has reached the receive; the proxy posts the direct chunks only then.
// Chunk size (FERRY_NET_CHUNK_BYTES) is an agreed knob: both sides cut a
// message the same way. Sizes are checked by the receiving proxy (the last
// chunk's trailer).
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "enqueue/p2p_engine.h"

namespace ferry {
namespace {

// Staging copies go in pieces of at most this size (whole chunks): the
// first chunks can travel while the rest is still being copied.
constexpr uint64_t kStagePieceBytes = uint64_t{4} << 20;
// The first pieces are a chunk each. A 4 MiB exchange across two emulated
// hosts (2x H200, session 39 trace) sent its first 1 MiB chunk, then the
// next three 100-130 us later, behind a 2 MiB piece: one link sat idle
// that long on a message that takes ~350 us on the wire.
constexpr uint64_t kSingleChunkPieces = 4;

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> netStagePieces(uint64_t bytes, uint64_t chunkBytes) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  if (bytes == 0 || chunkBytes == 0) return out;
  const uint64_t n = netChunks(bytes, chunkBytes);
  const uint64_t maxPiece =
      std::max({kStagePieceBytes / chunkBytes, (n + 15) / 16, uint64_t{1}}) * chunkBytes;
  uint64_t piece = chunkBytes;
  for (uint64_t off = 0; off < bytes; off += piece) {
    if (out.size() >= kSingleChunkPieces) piece = std::min(piece * 2, maxPiece);
    out.emplace_back(off, std::min(piece, bytes - off));
  }
  return out;
}

struct P2pEngine::NetTask {
  size_t task = 0;    // index into the launch's tasks
  size_t stream = 0;  // index into the launch's user streams
  ConnectionBase* conn = nullptr;
  NetOp op;
  // A task of the other direction in this launch shares bytes with this
  // one (an in-place exchange): it never goes direct, and a receive copies
  // out only after such sends have been staged.
  bool overlapped = false;
  std::shared_ptr<rt::Event> copied;  // after its copy stream's work
};

bool P2pEngine::isNet(const P2pTask& t) const {
  const ConnectionBase* c = t.isSend ? static_cast<const ConnectionBase*>(state_.send[t.peer].get())
                                     : state_.recv[t.peer].get();
  return c != nullptr && c->transport == TransportId::Net;
}

// Copies the send's bytes into its staging block, piece by piece, on the
// connection's stream; `filled` follows each piece. A direct send stages
// only its last chunk.
Status P2pEngine::stageNetSend(const P2pTask& t, NetOp& op) {
  rt::Stream& c = *op.conn->stream;
  NetWords& words = op.conn->netBuffers->words();
  if (op.direct != nullptr) {
    const uint64_t last = op.chunks() - 1;
    // Stream writes, ordered after the wait for the user's stream: the
    // direct chunks may go; then, after its copy, the last one.
    FERRY_CHECK(c.writeValue64(words.filled.raw(), op.firstChunk + last));
    FERRY_CHECK(c.copyAsync(op.data, op.direct + last * netChunk_, op.chunkSize(last)));
    return c.writeValue64(words.filled.raw(), op.firstChunk + last + 1);
  }
  // The first chunks go to the network early, and a message of any size is
  // a bounded number of stream operations (netStagePieces, trap 29).
  for (const auto& [off, len] : netStagePieces(t.bytes, netChunk_)) {
    FERRY_CHECK(c.copyAsync(op.data + off, static_cast<const char*>(t.buffer) + off, len));
    const uint64_t through = netChunks(off + len, netChunk_);
    // Stream write: ordered after the copy; the proxy (acquire) then sends.
    FERRY_CHECK(c.writeValue64(words.filled.raw(), op.firstChunk + through));
  }
  if (t.bytes == 0) FERRY_CHECK(c.writeValue64(words.filled.raw(), op.firstChunk + 1));
  return ncclSuccess;
}

// Copies the message out of its staging block a group of chunks at a time,
// each group once it has arrived; then `drained` frees the block.
Status P2pEngine::drainNetRecv(const P2pTask& t, NetOp& op) {
  rt::Stream& c = *op.conn->stream;
  NetWords& words = op.conn->netBuffers->words();
  if (op.direct != nullptr) {
    const uint64_t last = op.chunks() - 1;
    // Stream write, after the wait for the user's stream: the proxy may
    // land chunks in the user's buffer from now on.
    FERRY_CHECK(c.writeValue64(words.ready.raw(), op.seq + 1));
    // Acquire (the wait): the proxy's release store of `arrived` follows
    // every chunk, the direct ones in the user's buffer included.
    FERRY_CHECK(userWaitAt(c, words.arrived.raw(), op.firstChunk + last + 1));
    FERRY_CHECK(c.copyAsync(op.direct + last * netChunk_, op.data, op.chunkSize(last)));
    return c.writeValue64(words.drained.raw(), op.seq + 1);
  }
  const uint64_t n = op.chunks();
  const uint64_t maxGroup = std::max<uint64_t>((n + 7) / 8, 1);
  uint64_t group = 1;
  for (uint64_t k = 0; k < n; k += group, group = std::min(group * 2, maxGroup)) {
    const uint64_t end = std::min(n, k + group);
    // Acquire (the wait): the proxy's release store of `arrived` follows
    // the chunks' bytes in the block.
    FERRY_CHECK(userWaitAt(c, words.arrived.raw(), op.firstChunk + end));
    const uint64_t from = k * netChunk_, to = std::min(end * netChunk_, t.bytes);
    if (to > from) {
      FERRY_CHECK(c.copyAsync(static_cast<char*>(t.buffer) + from, op.data + from, to - from));
    }
  }
  // Stream write: ordered after every copy out of the block.
  return c.writeValue64(words.drained.raw(), op.seq + 1);
}

// Phase 1, no side effect but memory: the message's staging block.
Status P2pEngine::prepareNet(const P2pTask& t, ConnectionBase* conn, uint64_t seq,
                             uint64_t firstChunk, bool overlapped, NetOp* op) {
  Status failed = conn->failed.load();
  if (failed != ncclSuccess) {
    FERRY_FAIL(failed, "%s peer %d (another host): the connection failed earlier: %s",
               t.isSend ? "send to" : "receive from", t.peer, statusString(failed));
  }
  op->owner = this;
  op->conn = conn;
  op->seq = seq;
  op->firstChunk = firstChunk;
  op->bytes = t.bytes;
  op->chunkBytes = netChunk_;
  op->asyncError = asyncError_;
  op->timeoutNs = opTimeoutNs_;
  if (!overlapped) chooseNetDirect(t, *conn, *op);
  NetBuffers::SendWait wait;
  wait.posted = conn->nextSeq;  // this launch's messages are not the proxy's yet
  // FERRY_NET_STAGING_WAIT_US of nothing taken, plus 250 us per MiB: the
  // network may pause for as long as the receiver takes to drain one of
  // its blocks (at >= 4 GB/s), and pinning a block costs about that too.
  wait.ns = stagingWaitNs_ > 0 ? stagingWaitNs_ + static_cast<int64_t>(t.bytes >> 20) * 250000 : 0;
  wait.abort = abortFlag_;
  if (t.isSend && netStagingMax_ > 0) {
    wait.capRoom = netStagingMax_ > netSendStaging_ ? netStagingMax_ - netSendStaging_ : 0;
    wait.capWaitNs = netStagingCapWaitNs_;
  }
  const uint64_t last = op->chunks() - 1;
  const uint64_t staged = op->direct != nullptr ? op->chunkSize(last) : t.bytes;
  const uint64_t before = conn->netBuffers->stagingBytes();
  FERRY_CHECK(conn->netBuffers->take(staged + kNetTrailerBytes, seq, wait, &op->data, &op->mhandles,
                                     &op->blockBytes, &op->reuseAfter));
  if (!t.isSend) return ncclSuccess;
  noteNetSendStaging(conn->netBuffers->stagingBytes() - before, t.peer);
  // The trailer (net_progress.h) goes right after the bytes; the block is
  // free, so the CPU writes it now.
  const uint64_t trailer = t.bytes ^ kNetTrailerMagic;
  memcpy(op->chunkAt(last) + op->chunkSize(last), &trailer, sizeof(trailer));
  return ncclSuccess;
}

// Blocks are kept for reuse, so the pinned total only grows. Past the cap
// it grows only after the cap wait ran out, or where no wait could help (a
// message larger than every block, or whose oldest busy block belongs to
// this same launch): said once, with what to do.
void P2pEngine::noteNetSendStaging(uint64_t grew, int peer) {
  netSendStaging_ += grew;
  if (grew == 0 || netStagingMax_ == 0 || netSendStaging_ <= netStagingMax_ ||
      warnedNetStagingCap_) {
    return;
  }
  warnedNetStagingCap_ = true;
  FERRY_WARN(
      "send staging across hosts passes FERRY_NET_STAGING_MAX_BYTES=%llu (%llu bytes pinned; "
      "a send to peer %d found no block free within FERRY_NET_STAGING_CAP_WAIT_MS, or none it "
      "could wait for): this rank issues sends far ahead of what its stream and the network "
      "move; synchronize more often, or raise the cap or the wait",
      static_cast<unsigned long long>(netStagingMax_),
      static_cast<unsigned long long>(netSendStaging_), peer);
}

void P2pEngine::chooseNetDirect(const P2pTask& t, ConnectionBase& conn, NetOp& op) {
  if (!netGdr_ || t.bytes <= netChunk_ || !conn.netBuffers->directCapable()) return;
  rt::AllocationInfo a;
  // A buffer the runtime does not know as one device allocation (host
  // memory, a range past an allocation's end) stays staged.
  if (!ok(runtime_->describeAllocation(t.buffer, t.bytes, &a)) || a.allocId == 0 || a.size == 0) {
    return;
  }
  if (!conn.netBuffers->directRegistration(a, &op.directMh)) return;
  op.direct = static_cast<char*>(t.buffer);
}

// The network part is submitted first, and its receives make the user's
// stream wait until they have landed; the same-host part's copies come
// after that on the stream. So a same-host send whose bytes a network
// receive overwrites (an in-place ring whose neighbours sit on different
// hosts: nccl-tests' in-place sendrecv with -g N on several nodes) would
// read the received bytes, not its own. Such a send is copied into a
// device staging block first, on its stream, ahead of both parts, and
// sends from there; a network receive on another stream also waits for
// that copy. (The other way round is ordered: a network send's staging
// copy finishes before its stream posts a same-host receive.)
Status P2pEngine::copyAheadOfNet(const std::vector<P2pTask>& net, std::vector<P2pTask>* local,
                                 std::vector<AheadCopy>* ahead) {
  std::vector<void*> handles;
  Streams streams;
  for (P2pTask& t : *local) {
    if (!t.isSend || t.bytes == 0 || !overlapsOpposite(t, net)) continue;
    size_t at = 0;
    FERRY_CHECK(streamFor(t.stream, handles, streams, &at));
    StagingPool::Block* block = nullptr;
    PostInfo unused;
    FERRY_CHECK(devicePool().take(t.bytes, &block, &unused));
    ahead->push_back(AheadCopy{block, t.stream});
    char* copy = StagingPool::data(block);
    FERRY_CHECK(streams[at]->copyAsync(copy, t.buffer, t.bytes));
    std::shared_ptr<rt::Event> copied;
    FERRY_CHECK(newEvent(&copied));
    FERRY_CHECK(copied->record(*streams[at]));
    for (const P2pTask& r : net) {
      if (r.isSend || r.stream == t.stream || !overlaps(t, r)) continue;
      size_t rs = 0;
      FERRY_CHECK(streamFor(r.stream, handles, streams, &rs));
      FERRY_CHECK(streams[rs]->waitEvent(*copied));
    }
    if (!saidAhead_) {  // once: an in-place loop would say it every call
      saidAhead_ = true;
      FERRY_INFO(kLogP2p,
                 "send to peer %d (%llu bytes) shares bytes with a receive from another host in "
                 "its group: copied aside first (so are all such sends)",
                 t.peer, static_cast<unsigned long long>(t.bytes));
    }
    FERRY_TRACE(kLogP2p, "send to peer %d (%llu bytes): copied aside ahead of the network part",
                t.peer, static_cast<unsigned long long>(t.bytes));
    t.buffer = copy;
  }
  return ncclSuccess;
}

// The copies are free again once their streams have passed the launch:
// a stream waits for its sends to finish reading (or to be staged).
Status P2pEngine::releaseAhead(std::vector<AheadCopy>& ahead) {
  Status first = ncclSuccess;
  for (AheadCopy& a : ahead) {
    std::unique_ptr<rt::Stream> s;
    std::shared_ptr<rt::Event> passed;
    Status st = runtime_->wrapUserStream(a.stream, &s);
    if (st == ncclSuccess) st = newEvent(&passed);
    if (st == ncclSuccess) st = passed->record(*s);
    if (st == ncclSuccess) {
      devicePool().releaseAfter(a.block, std::move(passed));
    } else if (first == ncclSuccess) {
      // Kept busy for the communicator's life: never reused while a copy
      // the stream may still run could read it.
      first = st;
    }
  }
  ahead.clear();
  return first;
}

Status P2pEngine::launchNet(const std::vector<P2pTask>& tasks, const std::vector<P2pTask>& local) {
  std::vector<void*> handles;
  Streams streams;
  std::vector<NetTask> net(tasks.size());
  // Messages and chunks of this launch per connection so far: a message's
  // number (its first chunk's) is the connection's next plus that count.
  struct Earlier {
    uint64_t messages = 0;
    uint64_t chunks = 0;
  };
  std::unordered_map<const ConnectionBase*, Earlier> earlier;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const P2pTask& t = tasks[i];
    NetTask& n = net[i];
    n.task = i;
    n.conn = t.isSend ? static_cast<ConnectionBase*>(state_.send[t.peer].get())
                      : static_cast<ConnectionBase*>(state_.recv[t.peer].get());
    Earlier& e = earlier[n.conn];
    FERRY_CHECK(streamFor(t.stream, handles, streams, &n.stream));
    n.overlapped = overlapsOpposite(t, tasks);
    // An overlap with a same-host task of the group is not ordered (the two
    // parts are separate launches: NOTES.md trap 58's kind); such a task at
    // least never goes direct, which would widen the window to the
    // network's whole transfer time.
    const bool acrossParts = overlapsOpposite(t, local);
    FERRY_CHECK(prepareNet(t, n.conn, n.conn->nextSeq + e.messages, n.conn->nextChunk + e.chunks,
                           n.overlapped || acrossParts, &n.op));
    ++e.messages;
    e.chunks += n.op.chunks();
  }
  // Committed only now: nothing below fails without failing the connection.
  for (const NetTask& n : net) {
    ++n.conn->nextSeq;
    n.conn->nextChunk += n.op.chunks();
  }
  // The proxy gets the messages before their stream work exists: it only
  // acts on what the streams' words say, and a stream's queue may fill up
  // (CUDA's and the host runtime's block the submitting thread then) until
  // the proxy has moved some chunks.
  std::vector<NetOp> ops;
  for (NetTask& n : net) ops.push_back(n.op);
  proxy_->postNet(std::move(ops));
  Status s = submitNet(tasks, net, streams);
  // The proxy fails the connection's ops when it sees `failed`.
  if (!ok(s)) {
    for (NetTask& n : net) failNetConnection(*n.conn, s);
  }
  FERRY_CHECK(s);
  for (const P2pTask& t : tasks) countTask(t, false);
  return ncclSuccess;
}

Status P2pEngine::submitNet(const std::vector<P2pTask>& tasks, std::vector<NetTask>& net,
                            Streams& streams) {
  std::vector<std::shared_ptr<rt::Event>> starts(streams.size());
  for (size_t s = 0; s < streams.size(); ++s) {
    FERRY_CHECK(newEvent(&starts[s]));
    FERRY_CHECK(starts[s]->record(*streams[s]));
  }
  // Sends first: their stream work never waits for a peer, while a long
  // receive's can fill its stream's queue (CUDA then blocks this thread
  // until the peer's chunks arrive), and the peer's receive may need this
  // group's sends.
  std::vector<NetTask*> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (NetTask& n : net) {
      if (tasks[n.task].isSend == (pass == 0)) order.push_back(&n);
    }
  }
  for (NetTask* np : order) {
    NetTask& n = *np;
    const P2pTask& t = tasks[n.task];
    rt::Stream& c = *n.conn->stream;
    FERRY_CHECK(c.waitEvent(*starts[n.stream]));
    // An in-place receive lands in bytes that a send of this launch reads:
    // it copies out only after those sends were staged (sends came first).
    for (const NetTask& o : net) {
      if (t.isSend || !n.overlapped) break;
      const P2pTask& ot = tasks[o.task];
      if (ot.isSend && o.copied && overlaps(t, ot)) FERRY_CHECK(c.waitEvent(*o.copied));
    }
    FERRY_CHECK(t.isSend ? stageNetSend(t, n.op) : drainNetRecv(t, n.op));
    FERRY_CHECK(newEvent(&n.copied));
    FERRY_CHECK(n.copied->record(c));
    FERRY_CHECK(streams[n.stream]->waitEvent(*n.copied));
    if (t.isSend && n.op.direct != nullptr) {
      // Acquire (the wait): the proxy's release store of `sent` once the
      // network has taken every chunk out of the user's buffer.
      NetWords& words = n.conn->netBuffers->words();
      FERRY_CHECK(userWaitAt(*streams[n.stream], words.sent.raw(), n.op.seq + 1));
    }
    FERRY_TRACE(
        kLogP2p | kLogNet, "%s peer %d: message %llu (%llu bytes, chunks %llu..%llu%s) via %s",
        t.isSend ? "send to" : "recv from", t.peer, static_cast<unsigned long long>(n.op.seq),
        static_cast<unsigned long long>(t.bytes), static_cast<unsigned long long>(n.op.firstChunk),
        static_cast<unsigned long long>(n.op.firstChunk + n.op.chunks() - 1),
        n.op.direct != nullptr ? ", direct" : "", transportName(TransportId::Net));
  }
  return ncclSuccess;
}

// A launch that failed after numbering its messages: the peer's matching
// ones can never complete, so the connection fails. The proxy, which sees
// `failed` at its next pass over the connection's ops, closes the comm
// (telling the peer; only the proxy closes a comm early: net_link.h), and
// this rank's stream waits are released now and again by the proxy.
void P2pEngine::failNetConnection(ConnectionBase& conn, Status s) {
  Status expected = ncclSuccess;
  conn.failed.compare_exchange_strong(expected, s);
  // Release stores: only this rank's streams and staging wait on these.
  NetWords& words = conn.netBuffers->words();
  words.arrived.store(kReleased);
  words.sent.store(kReleased);
  expected = ncclSuccess;
  asyncError_->compare_exchange_strong(expected, s, std::memory_order_release);
}

}  // namespace ferry
