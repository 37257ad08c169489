// The proxy (DESIGN.md layer 6): one thread per process, shared by every
// communicator of the process, that drives SM-free operations and serves the
// local RPC (rpc.h).
//
// The loop: take newly posted operations, serve RPC requests, and advance
// every connection's head operation once (progressOp). A connection's
// operations run in order (NCCL's per-peer ordering); different connections
// never wait on each other. When nothing is posted the thread sleeps in
// poll() on an eventfd (post() writes it) and the RPC sockets; while
// operations wait on peers it spins for FERRY_PROXY_SPIN_US and then backs
// off to short sleeps (at most 20 us on CUDA, 1 ms on the host runtime), so
// waiting ranks do not burn a core.
//
// Threading: post/detach/rpc are called from user threads; everything else
// runs on the proxy thread. Lifetime: acquire() starts the thread on first
// use; it stops when the last reference is dropped (the last communicator
// destroyed).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "core/status.h"
#include "proxy/p2p_op.h"
#include "proxy/rpc.h"

namespace ferry {

class Proxy {
 public:
  ~Proxy();
  [[nodiscard]] static Status acquire(rt::Runtime* runtime, int64_t spinUs,
                                      std::shared_ptr<Proxy>* out);

  RpcServer& rpc() { return *rpc_; }

  // Hands operations to the proxy thread, which deletes each when done.
  void post(std::vector<P2pOp*> ops);
  // Waits (up to timeoutMs) until no operation of `owner` remains. With
  // abort, pending operations are dropped at once and their connections'
  // stream waits released. ncclSystemError on timeout.
  [[nodiscard]] Status detach(const void* owner, bool abort, int64_t timeoutMs);

 private:
  Proxy() = default;
  void loop();
  void takePosted();
  bool progressAll();
  void dropOwner(const void* owner);
  void failConnection(ConnectionBase& conn, Status s, std::vector<P2pOp*>& done);
  void retire(std::vector<P2pOp*>& done);
  void checkPeers();
  bool timedOut(P2pOp& op);
  void sleepUntilWork(int timeoutMs);
  void wake();
  size_t pendingOps(const void* owner);

  std::unique_ptr<RpcServer> rpc_;
  UniqueFd wakeFd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  int64_t spinUs_ = 200;
  int64_t maxSleepUs_ = 1000;

  std::mutex mu_;  // guards inbox_, dropRequests_, counts_
  std::vector<P2pOp*> inbox_;
  std::vector<const void*> dropRequests_;
  std::vector<std::pair<const void*, size_t>> counts_;  // live ops per owner

  // Proxy-thread state: connections with queued operations.
  std::vector<ConnectionBase*> active_;
};

}  // namespace ferry
