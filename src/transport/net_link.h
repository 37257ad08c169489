// A network connection's hold on the process's network engine
// (TransportId::Net; transport/net_setup.h establishes it): the engine, the
// device, and the engine's send or receive comm. A receiver also holds its
// listen comm until accept() has returned the comm: each receive connection
// listens on its own, so whatever accept() returns belongs to that peer.
//
// Closing goes through the engine when the link is destroyed, or earlier
// when the proxy fails the connection (closing is how the peer on the other
// host learns of it: its next request on the comm fails); a failure there
// is logged and otherwise ignored (nothing could be done about it).
//
// Threading: the engine serializes its own calls (net/net_registry.h). The
// comm's lifetime is guarded by `mu`: the user's thread registers memory
// on it (regMr) while the proxy thread may close it (closeComm). The proxy
// thread, the only one that closes it early, uses it for transfers without
// the lock.
#pragma once

#include <array>
#include <mutex>

#include "core/log.h"
#include "core/status.h"
#include "net/net.h"

namespace ferry {

// A point-to-point network connection spreads its chunks over this many
// links at most (FERRY_NET_LINKS); a staging block carries one registration
// per link.
constexpr int kMaxNetLinks = 8;
using NetMhandles = std::array<void*, kMaxNetLinks>;

struct NetLink {
  NetLink(net::NetEngine* e, int d, bool send) : engine(e), dev(d), isSend(send) {}
  ~NetLink() {
    closeComm();
    closeListen();
  }
  NetLink(const NetLink&) = delete;
  NetLink& operator=(const NetLink&) = delete;

  void closeListen() {
    if (listenComm == nullptr) return;
    Status s = engine->closeListen(listenComm);
    if (!ok(s)) {
      FERRY_WARN("NET/%s: closing a listen comm failed: %s (ignored)", engine->name(),
                 statusString(s));
    }
    listenComm = nullptr;
  }

  void closeComm() {
    std::lock_guard<std::mutex> lock(mu);
    if (comm == nullptr) return;
    Status s = isSend ? engine->closeSend(comm) : engine->closeRecv(comm);
    if (!ok(s)) {
      FERRY_WARN("NET/%s: closing a %s comm failed: %s (ignored)", engine->name(),
                 isSend ? "send" : "receive", statusString(s));
    }
    comm = nullptr;
  }

  // Registers memory on the comm (host memory, or device memory with
  // net::kPtrCuda where the engine takes it); ncclSystemError once the comm
  // is closed.
  [[nodiscard]] Status regMr(void* data, size_t bytes, void** mhandle, int type = net::kPtrHost) {
    std::lock_guard<std::mutex> lock(mu);
    if (comm == nullptr) FERRY_FAIL(ncclSystemError, "NET/%s: connection closed", engine->name());
    return engine->regMr(comm, data, bytes, type, mhandle);
  }
  // Deregisters (nothing to do once the comm is closed: the engine freed
  // its registrations with it).
  void deregMr(void* mhandle) {
    std::lock_guard<std::mutex> lock(mu);
    if (comm == nullptr || mhandle == nullptr) return;
    Status s = engine->deregMr(comm, mhandle);
    if (!ok(s)) FERRY_WARN("NET/%s: deregMr failed: %s (ignored)", engine->name(), statusString(s));
  }

  net::NetEngine* const engine;  // the process's; never destroyed
  const int dev;
  const bool isSend;
  void* comm = nullptr;        // send comm (isSend) or receive comm, once connected
  void* listenComm = nullptr;  // receiver, until accept() returns `comm`
  std::mutex mu;               // guards `comm` against closeComm (see above)
};

}  // namespace ferry
