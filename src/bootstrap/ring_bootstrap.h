// The Bootstrap implementation: a mesh of lazily opened, cached, one-way TCP
// connections between ranks, driven by a single-threaded progress engine.
//
// Connections: rank A's first send to B opens A->B (to B's listen socket),
// announces itself with a PeerHello frame, and keeps it for every later
// message A->B; B reads only from it. Every data frame carries srcRank and
// tag; frames are buffered per (peer, tag) in arrival order until recv takes
// them. Connections accepted on the listen socket stay "pending" until a
// valid PeerHello arrives before their own deadline (min(5 s, time left));
// strangers, garbage and wrong magics are dropped with a WARN.
//
// Progress: every wait inside send/recv/allGather/barrier runs progress(),
// which polls the listen socket, pending and incoming connections (and the
// fd being waited on) in <= 100 ms slices and drains whatever arrived. Hence
// a send blocked on a full socket buffer still consumes incoming messages, so
// two ranks sending large messages to each other cannot deadlock.
//
// Threading: one thread at a time (the owner); no internal threads.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/frame_reader.h"
#include "bootstrap/socket.h"

namespace ferry::boot {

// Reserved tags (< kUserTagBase).
constexpr uint32_t kTagAllGather = 1;
constexpr uint32_t kTagBarrierBase = 0x10;  // + round (< 32 rounds)

class RingBootstrap final : public Bootstrap {
 public:
  RingBootstrap(int rank, int nranks, uint64_t magic, const BootstrapOptions& options,
                Socket listen);
  ~RingBootstrap() override = default;

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  Status allGather(void* data, size_t bytesPerRank) override;
  Status send(int peer, uint32_t tag, const void* data, size_t bytes) override;
  Status recv(int peer, uint32_t tag, void* data, size_t bytes) override;
  Status barrier() override;

  // Used by Bootstrap::create.
  const SocketAddress& listenAddress() const override { return listenAddr_; }
  void setPeerAddress(int peer, const SocketAddress& addr) { peerAddrs_[peer] = addr; }
  // Ring all-gather of every rank's listen address (needs the successor's).
  [[nodiscard]] Status exchangeAddresses(const WaitContext& wait);
  WaitContext newWait() const { return WaitContext::make(options_.timeoutMs, options_.abortFlag); }

 private:
  struct Pending {
    Socket sock;
    FrameReader reader;
    Deadline deadline;
    SocketAddress from;
  };
  struct Incoming {
    Socket sock;
    FrameReader reader;
  };
  using Key = std::pair<int, uint32_t>;

  [[nodiscard]] Status sendImpl(int peer, uint32_t tag, const void* data, size_t bytes,
                                const WaitContext& wait);
  [[nodiscard]] Status recvImpl(int peer, uint32_t tag, void* data, size_t bytes,
                                const WaitContext& wait);
  [[nodiscard]] Status connectPeer(int peer, const WaitContext& wait);
  [[nodiscard]] Status sendBytes(const Socket& sock, const uint8_t* p, size_t n,
                                 const WaitContext& wait, const char* what);
  // One poll round (<= 100 ms); extraFd (or -1) is polled for extraEvents and
  // *extraReady reports it. Fails on abort/deadline.
  [[nodiscard]] Status progress(const WaitContext& wait, const char* what, int extraFd = -1,
                                short extraEvents = 0, bool* extraReady = nullptr);
  void acceptAll();
  void servicePending(Pending& p);
  void serviceIncoming(int peer, Incoming& in);
  void dropExpiredPending();

  int rank_;
  int nranks_;
  uint64_t magic_;
  BootstrapOptions options_;
  Socket listen_;
  SocketAddress listenAddr_;
  std::vector<SocketAddress> peerAddrs_;
  std::map<int, Socket> outgoing_;
  std::map<int, Incoming> incoming_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<Key, std::deque<std::vector<uint8_t>>> unexpected_;
  std::vector<Status> peerFailure_;  // set when a peer's connection broke
};

}  // namespace ferry::boot
