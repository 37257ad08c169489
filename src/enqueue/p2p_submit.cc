// P2pEngine: what a launch submits to the streams once its messages are
// claimed (phases 1-4 of p2p_engine.h), and sends to self paired with
// receives from self.
#include <algorithm>

#include "algo/p2p_kernel.h"
#include "enqueue/p2p_engine.h"
#include "enqueue/p2p_engine_op.h"

namespace ferry {
// A staged send's bytes are copied into its block on the user's stream; as
// the first side it then marks them ready for the peer to pull.
Status P2pEngine::stageSends(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                             Streams& streams, size_t stream) {
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    if (op.stream != stream || !op.send || op.block == nullptr) continue;
    rt::Stream& s = *streams[stream];
    FERRY_CHECK(s.copyAsync(StagingPool::data(op.block), tasks[i].buffer, tasks[i].bytes));
    // Stream write: ordered after the staging copy (and everything before it).
    if (op.first) FERRY_CHECK(s.writeValue64(op.conn->ctrl.dev(op.slot().ready), op.gen()));
  }
  return ncclSuccess;
}

Status P2pEngine::markReady(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                            Streams& streams, std::vector<std::shared_ptr<rt::Event>>* starts) {
  // A receive into a buffer that a staged send of the group reads: the
  // staging copy goes first, or the peer could overwrite unread bytes.
  bool stageFirst = false;
  for (size_t i = 0; i < ops.size() && !stageFirst; ++i) {
    if (!ops[i].send || ops[i].block == nullptr) continue;
    for (size_t j = 0; j < ops.size() && !stageFirst; ++j) {
      stageFirst = !tasks[j].isSend && overlaps(tasks[i], tasks[j]);
    }
  }
  starts->assign(streams.size(), nullptr);
  for (size_t s = 0; s < streams.size(); ++s) {
    if (stageFirst) FERRY_CHECK(stageSends(tasks, ops, streams, s));
    bool anySecond = false;
    for (Op& op : ops) {
      if (op.stream != s) continue;
      anySecond = anySecond || !op.first;
      if (!op.first || (op.send && op.block != nullptr)) continue;
      // Stream write: everything before it on the user's stream is done, so
      // the peer may now read the send's bytes or write the receive buffer.
      FERRY_CHECK(streams[s]->writeValue64(op.conn->ctrl.dev(op.slot().ready), op.gen()));
    }
    if (!stageFirst) FERRY_CHECK(stageSends(tasks, ops, streams, s));
    if (!anySecond || copiesOnUserStream(ops, s)) continue;
    FERRY_CHECK(newEvent(&(*starts)[s]));
    FERRY_CHECK((*starts)[s]->record(*streams[s]));
  }
  return ncclSuccess;
}

bool P2pEngine::copiesOnUserStream(const std::vector<Op>& ops, size_t stream) const {
  if (!userStreamCopy_) return false;
  int seconds = 0;
  bool waits = true;
  for (const Op& op : ops) {
    if (op.stream != stream) continue;
    if (op.streamCopiesSelf && selfCopy_ < SelfCopy::After) return false;
    if (op.first) continue;
    ++seconds;
    waits = waits && op.userStreamWaits();
  }
  // Two or more copies stay on their connections' streams, where they run
  // side by side, and so does one beside a self copy on that stream (2x
  // H200: all-to-all at 64 MiB-1 GiB took 0.96-0.99x NCCL's time with the
  // two in a row, 1.10x side by side, session 25); a copy the stream does
  // not wait for (a detached staged send's) must not hold the stream up.
  return seconds == 1 && waits;
}

// This rank's copies as the second side, each on its connection's stream:
// after the user's stream reached the group (event), after the first side
// is ready (a GPU wait only if the CPU does not see its flag yet), then
// `done` for the first side. With FERRY_P2P_USER_STREAM_COPY a stream's only
// copy runs on the user stream itself, already in order: no event either way.
Status P2pEngine::copyAsSecond(Stepped& l) {
  const std::vector<P2pTask>& tasks = l.tasks;
  std::vector<Op>& ops = l.ops;
  Streams& streams = l.streams;
  std::vector<bool> onUser(streams.size());
  for (size_t s = 0; s < streams.size(); ++s) onUser[s] = copiesOnUserStream(ops, s);
  // A GPU's copy engine runs its peer copies in issue order even on
  // separate streams: issued in call order (peer 0 first on every rank, as
  // all-to-alls call), every GPU writes into the same peer at once
  // (rotatedOrder says what that costs).
  for (size_t i : rotatedOrder(tasks, myRank_, static_cast<int>(state_.send.size()))) {
    Op& op = ops[i];
    if (op.first) continue;
    rt::Stream* c = nullptr;
    FERRY_CHECK(beginSecond(op, streams, l.starts, onUser, &c));
    char* mine =
        op.block != nullptr ? StagingPool::data(op.block) : static_cast<char*>(tasks[i].buffer);
    char* dst = op.send ? op.remote : mine;
    const char* src = op.send ? mine : op.remote;
    SelfPair pair;
    if (onUser[op.stream] && takePiecesPair(l, l.handles[op.stream], &pair)) {
      FERRY_CHECK(
          copyInPieces(*c, dst, src, tasks[i].bytes, l.all[pair.first], l.all[pair.second]));
    } else {
      FERRY_CHECK(c->copyAsync(dst, src, tasks[i].bytes));
    }
    FERRY_CHECK(endSecond(tasks[i], op, *c, onUser[op.stream]));
  }
  return ncclSuccess;
}

bool P2pEngine::takePiecesPair(Stepped& l, void* handle, SelfPair* out) {
  if (selfCopy_ != SelfCopy::Pieces) return false;
  for (auto it = l.pairs.begin(); it != l.pairs.end(); ++it) {
    const P2pTask& snd = l.all[it->first];
    const P2pTask& rcv = l.all[it->second];
    if (snd.stream != handle || rcv.stream != handle) continue;
    if (rcv.bytes == 0 || rcv.buffer == snd.buffer) continue;
    *out = *it;
    l.pairs.erase(it);
    return true;
  }
  return false;
}

// The peer copy and the self copy on one stream, alternating in kPieces
// pieces each: the self copy (HBM at full speed) never runs beside the
// peer copy, and is spread over it instead of following it (a GEMM beside
// the all-to-all shape lost x1.055 with the two at once, x1.012 with the
// local copy after, x0.992 in 8 pieces: 2x H200, ferry-overlap-floor,
// session 34). selfPairs already checked that the pair's buffers touch no
// other task's; the send's bytes are the stream's, so the copy needs no
// event.
Status P2pEngine::copyInPieces(rt::Stream& c, char* dst, const char* src, uint64_t bytes,
                               const P2pTask& selfSend, const P2pTask& selfRecv) {
  constexpr uint32_t kPieces = 8;
  const uint64_t selfBytes = selfRecv.bytes;
  auto* selfDst = static_cast<char*>(selfRecv.buffer);
  const auto* selfSrc = static_cast<const char*>(selfSend.buffer);
  for (uint32_t k = 0; k < kPieces; ++k) {
    uint64_t po = 0, pn = 0, so = 0, sn = 0;  // 16-byte aligned pieces, as kernel p2p's lanes
    algo::p2pLanePart(bytes, kPieces, k, &po, &pn);
    algo::p2pLanePart(selfBytes, kPieces, k, &so, &sn);
    if (pn > 0) FERRY_CHECK(c.copyAsync(dst + po, src + po, pn));
    if (sn > 0) FERRY_CHECK(c.copyAsync(selfDst + so, selfSrc + so, sn));
  }
  countTask(selfSend, false);
  countTask(selfRecv, false);
  FERRY_TRACE(kLogP2p,
              "self: %llu bytes copied in %u pieces between those of a %llu-byte peer copy",
              static_cast<unsigned long long>(selfBytes), static_cast<unsigned>(kPieces),
              static_cast<unsigned long long>(bytes));
  return ncclSuccess;
}

// A second-side copy's stream (*c), after its waits: for the user's stream
// to reach the group (connection streams) and for the first side's `ready`.
Status P2pEngine::beginSecond(Op& op, Streams& streams,
                              const std::vector<std::shared_ptr<rt::Event>>& starts,
                              const std::vector<bool>& onUser, rt::Stream** c) {
  const bool user = onUser[op.stream];
  *c = user ? streams[op.stream].get() : op.conn->stream.get();
  if (!user) FERRY_CHECK((*c)->waitEvent(*starts[op.stream]));
  // Acquire: the first side's bytes are complete once its flag is seen.
  op.gpuWaitReady = op.gpuWaitReady && op.slot().ready.load() < op.gen();
  if (op.gpuWaitReady) FERRY_CHECK(userWait(**c, op.conn->ctrl, op.slot().ready, op.gen()));
  return ncclSuccess;
}

Status P2pEngine::endSecond(const P2pTask& t, Op& op, rt::Stream& c, bool onUser) {
  // Stream write: ordered after the copy, so the peer sees the bytes first.
  FERRY_CHECK(c.writeValue64(op.conn->ctrl.dev(op.slot().done), op.gen()));
  if (op.userStreamWaits() && !onUser) {
    FERRY_CHECK(newEvent(&op.copied));
    FERRY_CHECK(op.copied->record(c));
  }
  FERRY_TRACE(kLogP2p, "%s peer %d: message %llu (%llu bytes) copied as the second side%s%s",
              op.send ? "send to" : "recv from", t.peer, static_cast<unsigned long long>(op.seq),
              static_cast<unsigned long long>(t.bytes),
              op.gpuWaitReady ? " after a GPU wait for the peer" : "",
              onUser ? " on the user stream" : "");
  return ncclSuccess;
}

// The user streams' waits: for their own copies, and, as the first side,
// for the peer's copy (then a staged receive's copy out of its block).
Status P2pEngine::waitForPeers(const std::vector<P2pTask>& tasks, std::vector<Op>& ops,
                               Streams& streams) {
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    rt::Stream& s = *streams[op.stream];
    if (op.copied) FERRY_CHECK(s.waitEvent(*op.copied));
    op.copied.reset();
    if (op.first && op.userStreamWaits()) {
      FERRY_CHECK(userWait(s, op.conn->ctrl, op.slot().done, op.gen()));
    }
    if (op.block == nullptr) continue;
    if (op.send) {  // the peer (or our copy) reads the block until done
      op.pool->releaseWhenDone(op.block, &op.ctrl(), op.seq);
      continue;
    }
    FERRY_CHECK(s.copyAsync(tasks[i].buffer, StagingPool::data(op.block), tasks[i].bytes));
    std::shared_ptr<rt::Event> out;
    FERRY_CHECK(newEvent(&out));
    FERRY_CHECK(out->record(s));
    op.pool->releaseAfter(op.block, std::move(out));
  }
  return ncclSuccess;
}

void P2pEngine::postWatches(const std::vector<Op>& ops) {
  std::vector<P2pWatch> watches;
  watches.reserve(ops.size());
  for (const Op& op : ops) {
    P2pWatch w;
    w.owner = this;
    w.conn = op.conn;
    w.seq = op.seq;
    w.first = op.first;
    w.waitsDone = op.first && op.userStreamWaits();
    w.waitsReady = !op.first && op.gpuWaitReady;
    w.mapping = op.mapping;
    w.asyncError = asyncError_;
    w.timeoutNs = opTimeoutNs_;
    watches.push_back(std::move(w));
  }
  proxy_->post(std::move(watches));
}

namespace {

// Whether pair (send s, receive r) may run as a copy beside the group's other
// tasks: its destination touches no other buffer of the group, and its
// source no buffer that another task writes (a pair whose two buffers are
// the same range copies nothing).
bool pairStandsAlone(const std::vector<P2pTask>& tasks, size_t s, size_t r) {
  if (overlaps(tasks[s], tasks[r]) && tasks[s].buffer != tasks[r].buffer) return false;
  for (size_t j = 0; j < tasks.size(); ++j) {
    if (j == s || j == r) continue;
    if (overlaps(tasks[r], tasks[j])) return false;
    if (!tasks[j].isSend && overlaps(tasks[s], tasks[j])) return false;
  }
  return true;
}

}  // namespace

// All of the group's self operations become copies, or none: the self
// connection's in-order matching then stays what it would have been. Taken
// only when nothing earlier is unmatched there (equal sequence counters), the
// k-th self send and k-th self receive have equal sizes, no pair touches
// another task's buffers, and the copies never block this thread.
Status P2pEngine::selfPairs(const std::vector<P2pTask>& tasks, std::vector<SelfPair>* pairs) {
  pairs->clear();
  if (selfCopy_ == SelfCopy::Proxy) return ncclSuccess;
  std::vector<size_t> sends, recvs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].peer == myRank_) (tasks[i].isSend ? sends : recvs).push_back(i);
  }
  if (sends.empty() || sends.size() != recvs.size()) return ncclSuccess;
  const SendConnection* sc = state_.send[myRank_].get();
  const RecvConnection* rc = state_.recv[myRank_].get();
  if (sc != nullptr && rc != nullptr && sc->nextSeq != rc->nextSeq) return ncclSuccess;
  std::vector<SelfPair> found;
  for (size_t k = 0; k < sends.size(); ++k) {
    const P2pTask& snd = tasks[sends[k]];
    const P2pTask& rcv = tasks[recvs[k]];
    if (snd.bytes != rcv.bytes || !pairStandsAlone(tasks, sends[k], recvs[k])) {
      return ncclSuccess;
    }
    bool async = true;
    if (snd.bytes > 0) FERRY_CHECK(runtime_->copyIsAsync(rcv.buffer, snd.buffer, &async));
    if (!async) return ncclSuccess;
    found.emplace_back(sends[k], recvs[k]);
  }
  *pairs = std::move(found);
  return ncclSuccess;
}

Status P2pEngine::orderAfter(rt::Stream& later, rt::Stream& earlier) {
  std::shared_ptr<rt::Event> mark;
  FERRY_CHECK(newEvent(&mark));
  FERRY_CHECK(mark->record(earlier));
  return later.waitEvent(*mark);
}

// Each pair: the receive's stream waits for the send's stream to reach this
// point (its data is written), copies, and the send's stream waits for the
// copy (its buffer may be reused afterwards). Events only: no control word,
// nothing that waits for a peer.
Status P2pEngine::copySelfPairs(const std::vector<P2pTask>& tasks,
                                const std::vector<SelfPair>& pairs) {
  std::vector<void*> handles;
  Streams streams;
  for (const SelfPair& p : pairs) {
    const P2pTask& snd = tasks[p.first];
    const P2pTask& rcv = tasks[p.second];
    size_t si = 0, ri = 0;
    FERRY_CHECK(streamFor(snd.stream, handles, streams, &si));
    FERRY_CHECK(streamFor(rcv.stream, handles, streams, &ri));
    if (si != ri) FERRY_CHECK(orderAfter(*streams[ri], *streams[si]));
    if (rcv.bytes > 0 && rcv.buffer != snd.buffer) {
      FERRY_CHECK(copySelf(*streams[ri], static_cast<char*>(rcv.buffer),
                           static_cast<const char*>(snd.buffer), rcv.bytes));
    }
    if (si != ri) FERRY_CHECK(orderAfter(*streams[si], *streams[ri]));
    countTask(snd, false);
    countTask(rcv, false);
  }
  FERRY_TRACE(kLogP2p, "self: %zu send/receive pairs copied on the receives' streams",
              pairs.size());
  return ncclSuccess;
}

// FERRY_P2P_SELF_COPY_ROWS (default 4 KiB): one self copy as two strided
// copies (the even rows, then the odd ones) and a plain copy of the tail.
// Every copy within one GPU runs on SMs (the driver's copy kernel, whatever
// the API: ferry-copy-sm, session 36); the strided one is a slower kernel
// that a GEMM beside it barely feels. 256 MiB all-to-all, GEMM beside it
// (ferry-bench --overlap): 2x H100 x0.997-1.019 with rows against
// x1.083-1.122 with one plain copy, the all-to-all alone 10% faster; 2x
// H200 x1.016-1.018 against x1.076, 2.6% slower (NOTES.md trap 71).
// Overlapping ranges keep the plain copy (the second pass would read bytes
// the first one wrote), and so do copies of fewer than 32 rows.
Status P2pEngine::copySelf(rt::Stream& s, char* dst, const char* src, uint64_t bytes) {
  constexpr uint64_t kMinRows = 32;
  constexpr uint64_t kMaxHeight = 65535;  // rows per 2D copy: inside any driver's limit
  const uint64_t row = selfCopyRows_;
  const bool overlap = dst < src + bytes && src < dst + bytes;
  if (row == 0 || bytes < kMinRows * row || overlap) return s.copyAsync(dst, src, bytes);
  const uint64_t height = bytes / (2 * row);  // rows of each parity
  for (uint64_t parity = 0; parity < 2; ++parity) {
    for (uint64_t first = 0; first < height; first += kMaxHeight) {
      const uint64_t off = parity * row + first * 2 * row;
      FERRY_CHECK(s.copyRowsAsync(dst + off, 2 * row, src + off, 2 * row, row,
                                  std::min(kMaxHeight, height - first)));
    }
  }
  const uint64_t done = height * 2 * row;
  if (done < bytes) FERRY_CHECK(s.copyAsync(dst + done, src + done, bytes - done));
  FERRY_TRACE(kLogP2p, "self: %llu bytes copied as rows of %llu bytes",
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(row));
  return ncclSuccess;
}

}  // namespace ferry
