// The proxy (DESIGN.md layer 6): one thread per process, shared by every
// communicator of the process. It serves the local RPC (rpc.h: file
// descriptors of control blocks, staging blocks and host-runtime memory)
// and watches SM-free messages after their calls returned (p2p_watch.h):
// completion, peer errors, peer death, FERRY_P2P_TIMEOUT. It submits no GPU
// work: every copy and flag of a message is submitted by the user's thread
// inside the API call (transport/ctrl_block.h says why).
//
// The loop: take newly posted watches, serve RPC requests, check every
// watch; sleep in poll() on an eventfd (post() writes it) and the RPC
// sockets, for 1 ms while messages are watched and 50 ms otherwise.
//
// Threading: post/detach are called from user threads; everything else
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
#include "proxy/p2p_watch.h"
#include "proxy/rpc.h"

namespace ferry {

class Proxy {
 public:
  ~Proxy();
  [[nodiscard]] static Status acquire(rt::Runtime* runtime, std::shared_ptr<Proxy>* out);

  RpcServer& rpc() { return *rpc_; }

  // Hands watches of messages just submitted to the proxy thread.
  void post(std::vector<P2pWatch> watches);
  // Waits (up to timeoutMs) until no message of `owner` is in flight. With
  // abort, its messages are dropped at once and the waits of this rank's
  // streams on them released. ncclSystemError on timeout.
  [[nodiscard]] Status detach(const void* owner, bool abort, int64_t timeoutMs);

 private:
  Proxy() = default;
  void loop();
  void takePosted();
  void checkWatches(bool checkPeers);
  void failConnection(ConnectionBase* conn, Status s);
  void dropOwner(const void* owner);
  void forget(const P2pWatch& w);
  void sleepUntilWork(int timeoutMs);
  void wake();
  size_t inFlight(const void* owner);

  std::unique_ptr<RpcServer> rpc_;
  UniqueFd wakeFd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  std::mutex mu_;  // guards inbox_, dropRequests_, counts_
  std::vector<P2pWatch> inbox_;
  std::vector<const void*> dropRequests_;
  std::vector<std::pair<const void*, size_t>> counts_;  // messages in flight per owner

  // Proxy-thread state.
  std::vector<P2pWatch> watches_;
};

}  // namespace ferry
