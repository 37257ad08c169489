// The proxy (DESIGN.md layer 6): one thread per process, shared by every
// communicator of the process. It serves the local RPC (rpc.h: file
// descriptors of control blocks, staging blocks and host-runtime memory)
// and watches SM-free messages after their calls returned (p2p_watch.h):
// completion, peer errors, peer death, FERRY_P2P_TIMEOUT. For messages to
// and from other hosts it moves the bytes between host memory and the
// network engine (net_progress.h). It submits no GPU work: every copy and
// flag of a message is submitted by the user's thread inside the API call
// (transport/ctrl_block.h says why).
//
// The loop: take newly posted watches and network ops, serve RPC requests,
// check every watch, progress the network; sleep in poll() on an eventfd
// and the RPC sockets: for 50 ms when idle (a post() wakes it), 1 ms while
// messages are watched (a post() does not: the watch waits for the tick).
// While network transfers or ring hops across hosts exist it polls them:
// without sleeping (sched_yield between passes) until FERRY_PROXY_SPIN_US
// pass with nothing moved, posted or kicked, then in naps of 20-200 us that
// a post or kick() cuts short. A nap on every idle pass (the first version)
// put up to 200 us on each side of every message and ring hop: ~0.4-1 ms
// per small operation across hosts on 2x H200.
//
// Threading: post/detach are called from user threads; everything else
// runs on the proxy thread. Lifetime: acquire() starts the thread on first
// use; it stops when the last reference is dropped (the last communicator
// destroyed).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "core/status.h"
#include "proxy/net_progress.h"
#include "proxy/p2p_watch.h"
#include "proxy/rpc.h"
#include "proxy/ring_hop.h"

namespace ferry {

class Proxy {
 public:
  ~Proxy();
  // `spinUs`: FERRY_PROXY_SPIN_US, used when this call starts the thread.
  [[nodiscard]] static Status acquire(rt::Runtime* runtime, int64_t spinUs,
                                      std::shared_ptr<Proxy>* out);

  RpcServer& rpc() { return *rpc_; }

  // Hands watches of messages just submitted to the proxy thread.
  void post(std::vector<P2pWatch> watches);
  // Hands network messages just submitted to the proxy thread.
  void postNet(std::vector<NetOp> ops);
  // Waits (up to timeoutMs) until no message of `owner` is in flight. With
  // abort, its messages are dropped at once and the waits of this rank's
  // streams on them released. ncclSystemError on timeout.
  [[nodiscard]] Status detach(const void* owner, bool abort, int64_t timeoutMs);
  // Persistent ring hops across hosts (proxy/ring_hop.h) of one collective
  // engine: stepped on every pass from now on. `onFail` runs on the proxy
  // thread when a hop's engine call fails (the hop stops).
  void addRingHops(const void* owner, std::vector<RingHop*> hops,
                   std::function<void(int peer, const std::string& why)> onFail);
  // Stops stepping `owner`'s hops; returns once the proxy thread has let go
  // of them (their memory may then be freed).
  void removeRingHops(const void* owner);
  // Waits (up to timeoutMs) until `owner`'s send hops delivered every slot
  // their kernels filled; false on timeout.
  bool drainRingHops(const void* owner, int64_t timeoutMs);
  // Work for the network is about to appear (a collective whose ring
  // crosses hosts was just launched): poll without napping from now on.
  // Any thread; one eventfd write.
  void kick() { wake(); }
  // Drops every message of `owner` in flight, as detach with abort does,
  // and every one it posts until it detaches: its communicator failed.
  // Any thread; returns at once.
  void failOwner(const void* owner);

 private:
  Proxy() = default;
  void loop();
  bool takePosted();  // true when anything was posted
  void checkWatches(bool checkPeers);
  void failConnection(ConnectionBase* conn, Status s);
  void dropOwner(const void* owner);
  void forget(const void* owner);
  void count(const void* owner);         // one more in flight; mu_ held
  void dropIfFailed(const void* owner);  // mu_ held
  void sleepUntilWork(int timeoutMs);
  bool napOrWake(int napUs);  // true when a post or kick ended the nap
  void pollNetwork(int64_t nowNs, int64_t* lastActiveNs, int* napUs);
  bool stepRingHops();  // true when a hop moved
  void wake();
  bool inboxEmpty();  // takes mu_
  size_t inFlight(const void* owner);

  pid_t pid_ = 0;       // the process whose thread this is (fork() children get their own)
  int64_t spinNs_ = 0;  // FERRY_PROXY_SPIN_US
  std::unique_ptr<RpcServer> rpc_;
  UniqueFd wakeFd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // The thread is in (or about to enter) its long idle sleep: post() must
  // wake it. Cleared once it is awake.
  std::atomic<bool> idleSleep_{false};

  std::mutex mu_;  // guards inbox_, netInbox_, dropRequests_, counts_, failedOwners_
  std::vector<P2pWatch> inbox_;
  std::vector<NetOp> netInbox_;
  std::vector<const void*> dropRequests_;
  std::vector<std::pair<const void*, size_t>> counts_;  // messages in flight per owner
  std::vector<const void*> failedOwners_;               // failOwner'd, until they detach
  struct HopSet {
    const void* owner;
    std::vector<RingHop*> hops;
    std::function<void(int, const std::string&)> onFail;
  };
  std::mutex hopMu_;  // guards hopSets_; the proxy thread steps hops under it
  std::vector<HopSet> hopSets_;

  // Proxy-thread state.
  std::vector<P2pWatch> watches_;
  std::unique_ptr<NetProgress> net_;
};

}  // namespace ferry
