#include "bootstrap/ring_bootstrap.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "bootstrap/wire.h"
#include "core/log.h"

namespace ferry::boot {

namespace {

constexpr int64_t kHelloDeadlineMs = 5000;
constexpr size_t kMaxPending = 1024;
// Payloads up to this size travel in one send() with their header.
constexpr size_t kCoalesceBytes = 64 * 1024;

}  // namespace

RingBootstrap::RingBootstrap(int rank, int nranks, uint64_t magic, const BootstrapOptions& options,
                             Socket listen)
    : rank_(rank),
      nranks_(nranks),
      magic_(magic),
      options_(options),
      listen_(std::move(listen)),
      peerAddrs_(nranks),
      peerFailure_(nranks, ncclSuccess) {
  listenAddr_ = listen_.localAddress();
  peerAddrs_[rank] = listenAddr_;
}

// ---------------------------------------------------------------- progress --

void RingBootstrap::acceptAll() {
  for (int k = 0; k < 64; ++k) {
    Socket s;
    SocketAddress from;
    bool got = false;
    if (listen_.tryAccept(&s, &got, &from) != ncclSuccess || !got) return;
    if (pending_.size() >= kMaxPending) {
      FERRY_WARN("bootstrap: too many unidentified connections; dropping one from %s",
                 from.toString().c_str());
      continue;
    }
    auto p = std::make_unique<Pending>(
        Pending{std::move(s), FrameReader(magic_, kMaxControlPayload),
                Deadline::afterMs(std::min<int64_t>(kHelloDeadlineMs, options_.timeoutMs)), from});
    pending_.push_back(std::move(p));
  }
}

void RingBootstrap::servicePending(Pending& p) {
  std::string why;
  FrameReader::Result r = p.reader.pump(p.sock, &why);
  if (r == FrameReader::Result::kNeedMore) return;
  PeerHello hello;
  if (r == FrameReader::Result::kClosed) {
    why = "closed before a whole hello";
  } else if (r == FrameReader::Result::kFrame) {
    const FrameHeader& h = p.reader.header();
    if (h.type != FrameType::kPeerHello) {
      why = "first frame is not a peer hello";
    } else if (decodePeerHello(p.reader.payload().data(), p.reader.payload().size(), &hello,
                               &why) != ncclSuccess) {
      // why set by the decoder
    } else if (hello.rank != h.srcRank || hello.nranks != static_cast<uint32_t>(nranks_)) {
      why = "hello rank/nranks do not match this communicator";
    } else if (incoming_.count(static_cast<int>(hello.rank)) != 0) {
      why = "a connection from that rank already exists";
    }
  }
  if (why.empty()) {
    int peer = static_cast<int>(hello.rank);
    Incoming in{std::move(p.sock), FrameReader(magic_, kMaxFramePayload)};
    auto it = incoming_.emplace(peer, std::move(in)).first;
    // Frames may already be queued behind the hello.
    serviceIncoming(peer, it->second);
    return;
  }
  FERRY_WARN("bootstrap rank %d: dropping connection from %s: %s", rank_, p.from.toString().c_str(),
             why.c_str());
  p.sock.close();
}

void RingBootstrap::serviceIncoming(int peer, Incoming& in) {
  for (;;) {
    std::string why;
    FrameReader::Result r = in.reader.pump(in.sock, &why);
    if (r == FrameReader::Result::kNeedMore) return;
    if (r == FrameReader::Result::kFrame) {
      const FrameHeader& h = in.reader.header();
      if (h.type == FrameType::kData && h.srcRank == static_cast<uint32_t>(peer)) {
        unexpected_[Key(peer, h.tag)].push_back(std::move(in.reader.payload()));
        in.reader.next();
        continue;
      }
      why = "unexpected frame type or source rank";
      r = FrameReader::Result::kBad;
    }
    if (r == FrameReader::Result::kClosed && !in.reader.midFrame()) {
      // A clean close: the peer is done sending. Only a later recv from it fails.
      FERRY_TRACE(kLogBootstrap, "bootstrap rank %d: rank %d closed its connection", rank_, peer);
    } else {
      FERRY_WARN(
          "bootstrap rank %d: connection from rank %d broke: %s", rank_, peer,
          r == FrameReader::Result::kClosed ? "closed in the middle of a message" : why.c_str());
    }
    peerFailure_[peer] = ncclRemoteError;
    in.sock.close();
    return;
  }
}

void RingBootstrap::dropExpiredPending() {
  for (auto& p : pending_) {
    if (p->sock.valid() && p->deadline.expired()) {
      FERRY_WARN("bootstrap rank %d: no whole hello from %s in time; dropping it", rank_,
                 p->from.toString().c_str());
      p->sock.close();
    }
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const std::unique_ptr<Pending>& p) { return !p->sock.valid(); }),
                 pending_.end());
  for (auto it = incoming_.begin(); it != incoming_.end();) {
    it = it->second.sock.valid() ? std::next(it) : incoming_.erase(it);
  }
}

Status RingBootstrap::progress(const WaitContext& wait, const char* what, int extraFd,
                               short extraEvents, bool* extraReady) {
  FERRY_CHECK(wait.check(what));
  std::vector<pollfd> fds;
  fds.reserve(2 + pending_.size() + incoming_.size());
  fds.push_back(pollfd{listen_.fd(), POLLIN, 0});
  for (auto& p : pending_) fds.push_back(pollfd{p->sock.fd(), POLLIN, 0});
  for (auto& [peer, in] : incoming_) fds.push_back(pollfd{in.sock.fd(), POLLIN, 0});
  if (extraFd >= 0) fds.push_back(pollfd{extraFd, extraEvents, 0});
  int n = ::poll(fds.data(), fds.size(), wait.sliceMs());
  if (n < 0 && errno != EINTR) {
    FERRY_FAIL(ncclSystemError, "bootstrap: poll failed waiting for %s: %s", what, strerror(errno));
  }
  if (extraReady) *extraReady = false;
  if (n <= 0) {
    dropExpiredPending();
    return ncclSuccess;
  }
  size_t i = 1;
  for (auto& p : pending_) {
    if (fds[i++].revents != 0) servicePending(*p);
  }
  for (auto& [peer, in] : incoming_) {
    // Entries added by servicePending above sit past the polled ones; their
    // fds were not polled, so skip them by fd identity.
    if (i >= fds.size() || fds[i].fd != in.sock.fd()) continue;
    if (fds[i++].revents != 0) serviceIncoming(peer, in);
  }
  if (extraFd >= 0 && extraReady) *extraReady = fds.back().revents != 0;
  if (fds[0].revents != 0) acceptAll();
  dropExpiredPending();
  return ncclSuccess;
}

// ------------------------------------------------------------ send / recv --

Status RingBootstrap::sendBytes(const Socket& sock, const uint8_t* p, size_t n,
                                const WaitContext& wait, const char* what) {
  size_t off = 0;
  while (off < n) {
    size_t done = 0;
    FERRY_CHECK(sock.sendSome(p + off, n - off, &done));
    off += done;
    if (off < n && done == 0) FERRY_CHECK(progress(wait, what, sock.fd(), POLLOUT));
  }
  return ncclSuccess;
}

Status RingBootstrap::connectPeer(int peer, const WaitContext& wait) {
  const SocketAddress& addr = peerAddrs_[peer];
  if (!addr.valid()) {
    FERRY_FAIL(ncclInternalError, "bootstrap rank %d: address of rank %d is unknown", rank_, peer);
  }
  int64_t backoffMs = 5;
  for (;;) {
    Socket s;
    bool inProgress = false;
    int err = 0;
    FERRY_CHECK(Socket::startConnect(addr, &s, &inProgress, &err));
    while (err == 0 && inProgress) {
      bool ready = false;
      FERRY_CHECK(progress(wait, "a connection to a peer", s.fd(), POLLOUT, &ready));
      if (ready) {
        err = s.finishConnect();
        inProgress = false;
      }
    }
    if (err == 0) {
      auto frame = encodeFrame(
          magic_, FrameType::kPeerHello, rank_, 0,
          encodePeerHello(PeerHello{static_cast<uint32_t>(rank_), static_cast<uint32_t>(nranks_)}));
      FERRY_CHECK(sendBytes(s, frame.data(), frame.size(), wait, "sending a peer hello"));
      outgoing_.emplace(peer, std::move(s));
      return ncclSuccess;
    }
    if (!Socket::retriableConnectError(err)) {
      FERRY_FAIL(ncclSystemError, "bootstrap rank %d: connect to rank %d at %s failed: %s", rank_,
                 peer, addr.toString().c_str(), strerror(err));
    }
    Deadline retryAt = Deadline::afterMs(backoffMs);
    while (!retryAt.expired()) FERRY_CHECK(progress(wait, "a connection to a peer"));
    backoffMs = std::min<int64_t>(backoffMs * 2, 200);
  }
}

Status RingBootstrap::sendImpl(int peer, uint32_t tag, const void* data, size_t bytes,
                               const WaitContext& wait) {
  if (peer < 0 || peer >= nranks_) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap send: peer %d out of range [0,%d)", peer, nranks_);
  }
  if (bytes > kMaxFramePayload || (bytes > 0 && data == nullptr)) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap send: bad buffer (%zu bytes, max %llu)", bytes,
               static_cast<unsigned long long>(kMaxFramePayload));
  }
  const auto* p = static_cast<const uint8_t*>(data);
  if (peer == rank_) {
    unexpected_[Key(peer, tag)].emplace_back(p, p + bytes);
    return ncclSuccess;
  }
  if (outgoing_.count(peer) == 0) FERRY_CHECK(connectPeer(peer, wait));
  const Socket& s = outgoing_.at(peer);
  FrameHeader h;
  h.magic = magic_;
  h.type = FrameType::kData;
  h.srcRank = static_cast<uint32_t>(rank_);
  h.tag = tag;
  h.payloadLength = bytes;
  std::vector<uint8_t> buf(kFrameHeaderBytes);
  encodeFrameHeader(h, buf.data());
  if (bytes <= kCoalesceBytes) {
    buf.insert(buf.end(), p, p + bytes);
    return sendBytes(s, buf.data(), buf.size(), wait, "a send to a peer");
  }
  FERRY_CHECK(sendBytes(s, buf.data(), buf.size(), wait, "a send to a peer"));
  return sendBytes(s, p, bytes, wait, "a send to a peer");
}

Status RingBootstrap::recvImpl(int peer, uint32_t tag, void* data, size_t bytes,
                               const WaitContext& wait) {
  if (peer < 0 || peer >= nranks_ || (bytes > 0 && data == nullptr)) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap recv: bad peer %d or buffer", peer);
  }
  std::string what = "a message from rank " + std::to_string(peer) + " tag " + std::to_string(tag);
  for (;;) {
    auto it = unexpected_.find(Key(peer, tag));
    if (it != unexpected_.end() && !it->second.empty()) {
      std::vector<uint8_t> msg = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) unexpected_.erase(it);
      if (msg.size() != bytes) {
        FERRY_FAIL(ncclInvalidUsage,
                   "bootstrap rank %d: recv from rank %d tag %u expected %zu bytes but the "
                   "sender sent %zu",
                   rank_, peer, tag, bytes, msg.size());
      }
      if (bytes) memcpy(data, msg.data(), bytes);
      return ncclSuccess;
    }
    if (peerFailure_[peer] != ncclSuccess && incoming_.count(peer) == 0) {
      FERRY_FAIL(peerFailure_[peer],
                 "bootstrap rank %d: rank %d closed its connection while we "
                 "wait for %s",
                 rank_, peer, what.c_str());
    }
    FERRY_CHECK(progress(wait, what.c_str()));
  }
}

Status RingBootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes) {
  if (tag < kUserTagBase) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap send: tag %u is reserved (use >= %u)", tag,
               kUserTagBase);
  }
  return sendImpl(peer, tag, data, bytes, newWait());
}

Status RingBootstrap::recv(int peer, uint32_t tag, void* data, size_t bytes) {
  if (tag < kUserTagBase) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap recv: tag %u is reserved (use >= %u)", tag,
               kUserTagBase);
  }
  return recvImpl(peer, tag, data, bytes, newWait());
}

// ------------------------------------------------------------- collectives --

Status RingBootstrap::allGather(void* data, size_t bytesPerRank) {
  if (nranks_ == 1) return ncclSuccess;
  if (data == nullptr && bytesPerRank > 0) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap allGather: null buffer");
  }
  WaitContext wait = newWait();
  auto* base = static_cast<uint8_t*>(data);
  int succ = (rank_ + 1) % nranks_;
  int pred = (rank_ + nranks_ - 1) % nranks_;
  // Step s forwards the slot received in step s-1 (own slot at s = 0).
  for (int s = 0; s < nranks_ - 1; ++s) {
    int sendSlot = (rank_ - s + nranks_) % nranks_;
    int recvSlot = (rank_ - s - 1 + 2 * nranks_) % nranks_;
    FERRY_CHECK(sendImpl(succ, kTagAllGather, base + sendSlot * bytesPerRank, bytesPerRank, wait));
    FERRY_CHECK(recvImpl(pred, kTagAllGather, base + recvSlot * bytesPerRank, bytesPerRank, wait));
  }
  return ncclSuccess;
}

Status RingBootstrap::barrier() {
  // Dissemination barrier: ceil(log2 n) rounds; in round k rank r signals
  // r + 2^k and waits for r - 2^k. Each round has its own tag, so a fast
  // rank's next barrier cannot be mistaken for this one's other round.
  WaitContext wait = newWait();
  for (int k = 0, dist = 1; dist < nranks_; ++k, dist <<= 1) {
    uint32_t tag = kTagBarrierBase + static_cast<uint32_t>(k);
    FERRY_CHECK(sendImpl((rank_ + dist) % nranks_, tag, nullptr, 0, wait));
    FERRY_CHECK(recvImpl((rank_ - dist % nranks_ + nranks_) % nranks_, tag, nullptr, 0, wait));
  }
  return ncclSuccess;
}

Status RingBootstrap::exchangeAddresses(const WaitContext& wait) {
  if (nranks_ == 1) return ncclSuccess;
  std::vector<uint8_t> table(static_cast<size_t>(nranks_) * kAddressRecordBytes);
  WireWriter w;
  encodeAddress(listenAddr_, &w);
  memcpy(table.data() + static_cast<size_t>(rank_) * kAddressRecordBytes, w.data().data(),
         kAddressRecordBytes);
  int succ = (rank_ + 1) % nranks_;
  int pred = (rank_ + nranks_ - 1) % nranks_;
  for (int s = 0; s < nranks_ - 1; ++s) {
    int sendSlot = (rank_ - s + nranks_) % nranks_;
    int recvSlot = (rank_ - s - 1 + 2 * nranks_) % nranks_;
    FERRY_CHECK(sendImpl(succ, kTagAllGather, table.data() + sendSlot * kAddressRecordBytes,
                         kAddressRecordBytes, wait));
    FERRY_CHECK(recvImpl(pred, kTagAllGather, table.data() + recvSlot * kAddressRecordBytes,
                         kAddressRecordBytes, wait));
  }
  for (int r = 0; r < nranks_; ++r) {
    SocketAddress a;
    std::string why;
    if (decodeAddressRecord(table.data() + static_cast<size_t>(r) * kAddressRecordBytes,
                            kAddressRecordBytes, &a, &why) != ncclSuccess) {
      FERRY_FAIL(ncclRemoteError, "bootstrap rank %d: bad address for rank %d: %s", rank_, r,
                 why.c_str());
    }
    if (r == succ && !(a == peerAddrs_[succ])) {
      FERRY_FAIL(ncclRemoteError, "bootstrap rank %d: ring and root disagree on rank %d's address",
                 rank_, r);
    }
    peerAddrs_[r] = a;
  }
  return ncclSuccess;
}

}  // namespace ferry::boot
