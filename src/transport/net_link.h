// A network connection's hold on the process's network engine
// (TransportId::Net; transport/net_setup.h establishes it): the engine, the
// device, and the engine's send or receive comm. A receiver also holds its
// listen comm until accept() has returned the comm: each receive connection
// listens on its own, so whatever accept() returns belongs to that peer.
//
// Closing goes through the engine when the link is destroyed; a failure
// there is logged and otherwise ignored (the communicator is going away and
// nothing could be done about it).
//
// Threading: as the engine's (net/net_registry.h serializes its calls).
#pragma once

#include "core/log.h"
#include "core/status.h"
#include "net/net.h"

namespace ferry {

struct NetLink {
  NetLink(net::NetEngine* e, int d, bool send) : engine(e), dev(d), isSend(send) {}
  ~NetLink() {
    if (comm != nullptr) {
      Status s = isSend ? engine->closeSend(comm) : engine->closeRecv(comm);
      if (!ok(s)) {
        FERRY_WARN("NET/%s: closing a %s comm failed: %s (ignored)", engine->name(),
                   isSend ? "send" : "receive", statusString(s));
      }
    }
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

  net::NetEngine* const engine;  // the process's; never destroyed
  const int dev;
  const bool isSend;
  void* comm = nullptr;        // send comm (isSend) or receive comm, once connected
  void* listenComm = nullptr;  // receiver, until accept() returns `comm`
};

}  // namespace ferry
