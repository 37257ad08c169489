// The SM-free send/receive state machines (protocol: transport/ctrl_block.h).
#include <algorithm>
#include <limits>

#include "proxy/p2p_op.h"

namespace ferry {
namespace {

CtrlBlock& ctrlOf(ConnectionBase& c) {
  return *c.ctrl.ctrl;
}

// The copy stream waits for the user's stream to reach the operation before
// its first copy touches the user's buffer.
Status issueReadyWait(P2pOp& op, rt::Stream& stream) {
  if (op.readyIssued) return ncclSuccess;
  if (op.ready) FERRY_CHECK(stream.waitEvent(*op.ready));
  op.readyIssued = true;
  op.ready.reset();  // the wait captured the event; it may be reused now
  return ncclSuccess;
}

// The copy stream waits until bytes [0, end) of the op's source are ready:
// for a staged send, the events of the staging pieces that overlap them (each
// waited on once); otherwise the one ready event.
Status awaitSource(P2pOp& op, rt::Stream& stream, uint64_t end) {
  if (op.staged.empty()) return issueReadyWait(op, stream);
  while (op.stagedWaited < op.staged.size() && op.stagedWaited * op.stagePiece < end) {
    FERRY_CHECK(stream.waitEvent(*op.staged[op.stagedWaited]));
    op.staged[op.stagedWaited].reset();  // captured by the wait; may be reused
    ++op.stagedWaited;
  }
  return ncclSuccess;
}

Status checkPeerError(ConnectionBase& conn) {
  uint64_t e = ctrlOf(conn).error.load();
  if (e != 0) {
    FERRY_FAIL(static_cast<Status>(e), "peer %d reported a failure on this connection: %s",
               conn.peer, statusString(static_cast<Status>(e)));
  }
  return ncclSuccess;
}

// Marks the connection failed for the peer too (first error wins).
void reportToPeer(ConnectionBase& conn, Status s) {
  uint64_t expected = 0;
  ctrlOf(conn).error.value.compare_exchange_strong(expected, static_cast<uint64_t>(s),
                                                   std::memory_order_release);
}

// ---- send ------------------------------------------------------------------

// Reads the receiver's rendezvous for this message once it is posted.
Status sendMatch(P2pOp& op, bool* progressed) {
  SendConnection& c = *op.send;
  CtrlBlock& ctrl = ctrlOf(c);
  if (ctrl.recvPosted.load() <= op.seq) return ncclInProgress;  // acquire: rdv is filled
  const Rendezvous& rdv = ctrl.rdv[op.seq % kRdvSlots];
  if (rdv.seq != op.seq) {
    reportToPeer(c, ncclInternalError);
    FERRY_FAIL(ncclInternalError, "send to peer %d: rendezvous holds message %llu, expected %llu",
               c.peer, static_cast<unsigned long long>(rdv.seq),
               static_cast<unsigned long long>(op.seq));
  }
  if (rdv.bytes != op.bytes) {
    reportToPeer(c, ncclInvalidUsage);
    FERRY_FAIL(ncclInvalidUsage,
               "send to peer %d of %llu bytes is matched by a receive of %llu "
               "bytes (message %llu): sizes must be equal",
               c.peer, static_cast<unsigned long long>(op.bytes),
               static_cast<unsigned long long>(rdv.bytes), static_cast<unsigned long long>(op.seq));
  }
  op.mode = static_cast<RdvMode>(rdv.mode);
  op.alloc.allocId = rdv.allocId;
  op.alloc.size = rdv.allocSize;
  op.alloc.ipc.type = static_cast<rt::IpcDescriptor::Type>(rdv.ipcType);
  op.alloc.ipc.size = rdv.allocSize;
  std::copy(rdv.ipc, rdv.ipc + sizeof(rdv.ipc), op.alloc.ipc.bytes);
  op.offset = rdv.offset;  // zero-copy: offset of the buffer in the allocation
  if (op.mode == RdvMode::ZeroCopyLocal) op.peerDst = reinterpret_cast<char*>(rdv.localPtr);
  // Release: the receiver may reuse this rendezvous slot.
  ctrl.rdvConsumed.store(op.seq + 1);
  FERRY_TRACE(kLogP2p, "send to %d: message %llu (%llu bytes) matched, mode %u", c.peer,
              static_cast<unsigned long long>(op.seq), static_cast<unsigned long long>(op.bytes),
              rdv.mode);
  *progressed = true;
  op.state = op.mode == RdvMode::Fifo            ? P2pOp::State::Fifo
             : op.mode == RdvMode::ZeroCopyLocal ? P2pOp::State::WaitPeerReady
                                                 : P2pOp::State::MapPeer;
  if (op.mode == RdvMode::Fifo) op.offset = 0;
  return ncclSuccess;
}

// A CUDA legacy handle equal to one already mapped under another allocation
// id belongs to a freed allocation whose memory the peer reused (live
// allocations never share a handle, and ids are never reused). CUDA refuses
// to open a handle twice in one process, so the stale mapping is closed first,
// once the copies that may still use it have finished.
void evictStaleMapping(SendConnection& c, const rt::IpcDescriptor& desc) {
  if (desc.type != rt::IpcDescriptor::Type::CudaLegacy) return;
  for (auto it = c.zeroCopyMaps.begin(); it != c.zeroCopyMaps.end(); ++it) {
    if (std::equal(desc.bytes, desc.bytes + sizeof(desc.bytes), it->second.handle)) {
      (void)c.stream->synchronize();
      FERRY_INFO(kLogP2p, "peer %d: closing the stale mapping of freed allocation %llu", c.peer,
                 static_cast<unsigned long long>(it->first));
      c.zeroCopyMaps.erase(it);
      return;
    }
  }
}

// Maps the receiver's allocation once (cached by allocation id).
Status sendMapPeer(P2pOp& op, bool* progressed) {
  SendConnection& c = *op.send;
  auto it = c.zeroCopyMaps.find(op.alloc.allocId);
  if (it == c.zeroCopyMaps.end()) {
    rt::IpcDescriptor desc = op.alloc.ipc;
    UniqueFd fd;
    if (desc.type == rt::IpcDescriptor::Type::HostMemfd) {
      // The memfd comes from the peer's proxy; never block on it here.
      if (!op.fetching) {
        FERRY_CHECK(c.rpc->startFetch(RpcKind::Allocation, op.alloc.allocId, 0));
        op.fetching = true;
      }
      uint64_t size = 0;
      Status s = c.rpc->pollFetch(&fd, &size);
      if (s == ncclInProgress) return s;
      op.fetching = false;
      FERRY_CHECK(s);
      desc.fd = fd.release();
    }
    evictStaleMapping(c, desc);
    std::unique_ptr<rt::IpcMapping> mapping;
    FERRY_CHECK(op.runtime->importIpc(desc, &mapping));
    ZeroCopyMapping entry;
    entry.mapping = std::move(mapping);
    std::copy(desc.bytes, desc.bytes + sizeof(desc.bytes), entry.handle);
    it = c.zeroCopyMaps.emplace(op.alloc.allocId, std::move(entry)).first;
    FERRY_INFO(kLogP2p, "peer %d: mapped allocation %llu (%llu bytes) for zero-copy", c.peer,
               static_cast<unsigned long long>(op.alloc.allocId),
               static_cast<unsigned long long>(op.alloc.size));
  }
  if (op.offset + op.bytes > it->second.mapping->size()) {
    FERRY_FAIL(ncclInternalError, "zero-copy target [%llu, +%llu) exceeds allocation of %zu bytes",
               static_cast<unsigned long long>(op.offset),
               static_cast<unsigned long long>(op.bytes), it->second.mapping->size());
  }
  op.peerDst = static_cast<char*>(it->second.mapping->ptr()) + op.offset;
  op.state = P2pOp::State::WaitPeerReady;
  *progressed = true;
  return ncclSuccess;
}

// One copy straight into the receiver's buffer, once its stream is there.
Status sendZeroCopy(P2pOp& op, bool* progressed) {
  SendConnection& c = *op.send;
  CtrlBlock& ctrl = ctrlOf(c);
  if (op.streamWaitsPeer) {
    FERRY_CHECK(
        c.stream->waitValue64(c.ctrl.dev(ctrl.recvReady), op.seq + 1, rt::WaitCondition::Geq));
  } else if (ctrl.recvReady.load() <= op.seq) {  // acquire
    return ncclInProgress;
  }
  // One copy, or one per staging piece so each starts once its piece is staged.
  uint64_t piece = op.staged.empty() ? op.bytes : op.stagePiece;
  FERRY_CHECK(awaitSource(op, *c.stream, 0));
  for (uint64_t off = 0; off < op.bytes; off += piece) {
    uint64_t len = std::min(piece, op.bytes - off);
    FERRY_CHECK(awaitSource(op, *c.stream, off + len));
    FERRY_CHECK(c.stream->copyAsync(op.peerDst + off, op.buffer + off, len));
  }
  // Stream writes: ordered after the copy, so the receiver sees its data first.
  FERRY_CHECK(c.stream->writeValue64(c.ctrl.dev(ctrl.zcDone), op.seq + 1));
  FERRY_CHECK(c.stream->writeValue64(c.ctrl.dev(ctrl.sendDone), op.seq + 1));
  c.counters.zeroCopyOps.fetch_add(1, std::memory_order_relaxed);
  *progressed = true;
  return ncclSuccess;
}

// Chunks into the receiver's FIFO slots, as many as are free right now.
Status sendFifo(P2pOp& op, bool* progressed) {
  SendConnection& c = *op.send;
  CtrlBlock& ctrl = ctrlOf(c);
  FERRY_CHECK(awaitSource(op, *c.stream, 0));
  while (op.offset < op.bytes) {
    if (c.chunks - ctrl.head.load() >= c.nslots) return ncclInProgress;  // acquire: slot drained
    uint64_t slot = c.chunks % c.nslots;
    uint64_t len = std::min<uint64_t>(c.chunkBytes, op.bytes - op.offset);
    FERRY_CHECK(awaitSource(op, *c.stream, op.offset + len));
    // Plain store, published by the stream's tail write that follows the copy.
    ctrl.slotBytes[slot] = len;
    FERRY_CHECK(c.stream->copyAsync(c.peerFifo + slot * c.chunkBytes, op.buffer + op.offset, len));
    FERRY_CHECK(c.stream->writeValue64(c.ctrl.dev(ctrl.tail), c.chunks + 1));
    ++c.chunks;
    op.offset += len;
    *progressed = true;
  }
  FERRY_CHECK(c.stream->writeValue64(c.ctrl.dev(ctrl.sendDone), op.seq + 1));
  *progressed = true;
  return ncclSuccess;
}

// ---- receive ---------------------------------------------------------------

Status recvPost(P2pOp& op, bool* progressed) {
  RecvConnection& c = *op.recv;
  CtrlBlock& ctrl = ctrlOf(c);
  if (op.seq >= ctrl.rdvConsumed.load() + kRdvSlots) return ncclInProgress;  // slot still unread
  Rendezvous& rdv = ctrl.rdv[op.seq % kRdvSlots];
  rdv.seq = op.seq;
  rdv.bytes = op.bytes;
  rdv.mode = static_cast<uint32_t>(op.mode);
  rdv.ipcType = static_cast<uint32_t>(op.alloc.ipc.type);
  rdv.allocId = op.alloc.allocId;
  rdv.allocSize = op.alloc.size;
  rdv.offset =
      op.mode == RdvMode::ZeroCopyIpc ? reinterpret_cast<uint64_t>(op.buffer) - op.alloc.base : 0;
  rdv.localPtr = reinterpret_cast<uint64_t>(op.buffer);
  std::copy(op.alloc.ipc.bytes, op.alloc.ipc.bytes + sizeof(rdv.ipc), rdv.ipc);
  // Release: the sender's acquire load of recvPosted sees the whole entry.
  ctrl.recvPosted.store(op.seq + 1);
  FERRY_TRACE(kLogP2p, "recv from %d: message %llu (%llu bytes) posted, mode %u", c.peer,
              static_cast<unsigned long long>(op.seq), static_cast<unsigned long long>(op.bytes),
              rdv.mode);
  *progressed = true;
  op.state = P2pOp::State::Fifo;
  op.offset = 0;
  return ncclSuccess;
}

// Copies filled slots into the user's buffer, as many as have arrived.
Status recvFifo(P2pOp& op, bool* progressed) {
  RecvConnection& c = *op.recv;
  CtrlBlock& ctrl = ctrlOf(c);
  while (op.offset < op.bytes) {
    if (ctrl.tail.load() <= c.chunks) return ncclInProgress;  // acquire: the chunk landed
    FERRY_CHECK(issueReadyWait(op, *c.stream));
    uint64_t slot = c.chunks % c.nslots;
    uint64_t len = ctrl.slotBytes[slot];
    if (len == 0 || len > c.chunkBytes || len > op.bytes - op.offset) {
      reportToPeer(c, ncclInternalError);
      FERRY_FAIL(ncclInternalError, "receive from peer %d: chunk of %llu bytes does not fit",
                 c.peer, static_cast<unsigned long long>(len));
    }
    FERRY_CHECK(c.stream->copyAsync(op.buffer + op.offset, c.fifo + slot * c.chunkBytes, len));
    FERRY_CHECK(c.stream->writeValue64(c.ctrl.dev(ctrl.head), c.chunks + 1));
    ++c.chunks;
    op.offset += len;
    *progressed = true;
  }
  FERRY_CHECK(c.stream->writeValue64(c.ctrl.dev(ctrl.fifoDone), op.seq + 1));
  *progressed = true;
  return ncclSuccess;
}

Status progressSend(P2pOp& op, bool* progressed) {
  if (op.state == P2pOp::State::Start) {
    Status s = sendMatch(op, progressed);
    if (s != ncclSuccess) return s;
  }
  if (op.state == P2pOp::State::MapPeer) {
    Status s = sendMapPeer(op, progressed);
    if (s != ncclSuccess) return s;
  }
  if (op.state == P2pOp::State::WaitPeerReady) return sendZeroCopy(op, progressed);
  return sendFifo(op, progressed);
}

Status progressRecv(P2pOp& op, bool* progressed) {
  if (op.state == P2pOp::State::Start) {
    Status s = recvPost(op, progressed);
    if (s != ncclSuccess) return s;
    // Zero-copy: the sender's stream does the rest (copy, then zcDone).
    if (op.mode != RdvMode::Fifo) return ncclSuccess;
  }
  return recvFifo(op, progressed);
}

}  // namespace

Status progressOp(P2pOp& op, bool* progressed) {
  ConnectionBase& conn = op.kind == P2pOp::Kind::Send ? static_cast<ConnectionBase&>(*op.send)
                                                      : static_cast<ConnectionBase&>(*op.recv);
  FERRY_CHECK(checkPeerError(conn));
  FERRY_CHECK(op.runtime->setDevice(conn.device));
  Status s =
      op.kind == P2pOp::Kind::Send ? progressSend(op, progressed) : progressRecv(op, progressed);
  if (s == ncclSuccess) {
    FERRY_TRACE(kLogP2p, "%s peer %d: message %llu issued completely",
                op.kind == P2pOp::Kind::Send ? "send to" : "recv from", conn.peer,
                static_cast<unsigned long long>(op.seq));
    conn.counters.ops.fetch_add(1, std::memory_order_relaxed);
    conn.counters.bytes.fetch_add(op.bytes, std::memory_order_relaxed);
  }
  return s;
}

void releaseConnectionWaits(ConnectionBase& conn) {
  // Only the words THIS rank's streams wait on are released (the largest
  // count satisfies every Geq wait, past and future): a send side's sendDone
  // (its user stream) and recvReady (its copy stream); a receive side's
  // zcDone and fifoDone (its user stream). Words the peer waits on are left
  // alone: the peer learns of the failure from `error` and fails its own
  // operations, so it never mistakes a missing message for a delivered one.
  constexpr uint64_t kAll = std::numeric_limits<uint64_t>::max() / 2;
  CtrlBlock& ctrl = ctrlOf(conn);
  if (conn.isSend) {
    ctrl.sendDone.store(kAll);
    ctrl.recvReady.store(kAll);
  } else {
    ctrl.zcDone.store(kAll);
    ctrl.fifoDone.store(kAll);
  }
  reportToPeer(conn, ncclRemoteError);
}

}  // namespace ferry
