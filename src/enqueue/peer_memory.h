// Mappings of peers' memory, for the side that is SECOND for a message and
// copies to or from the first side's bytes (transport/ctrl_block.h).
//
// Process-wide, so two communicators with the same peer process share one
// mapping of an allocation (CUDA opens a legacy IPC handle once per
// process). Keys: the peer process (its proxy's RPC name) and the
// allocation id, or, for staging blocks offered through the RPC, the
// communicator key and the block key. A CUDA legacy handle equal to one
// already mapped under another id belongs to a freed allocation whose
// memory the peer reused: the stale mapping is closed first (its last copy
// has completed: the peer freed the memory only after waiting for it).
// Entries of freed memfd allocations are dropped, oldest first, once there
// are many and their last copy has completed.
//
// Threading: any thread (one mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "proxy/rpc.h"
#include "runtime/runtime.h"
#include "transport/ctrl_block.h"

namespace ferry {

struct PeerRef {
  std::string proxyName;     // the peer process's RPC name: its identity
  RpcClient* rpc = nullptr;  // a link to it for this thread's fetches
  uint64_t commKey = 0;      // the communicator (Resource keys)
  int rank = -1;             // for messages
  int64_t timeoutMs = 120000;
  const std::atomic<bool>* abortFlag = nullptr;
};

// One mapped allocation or staging block of a peer. Shared: a copy in
// flight holds it (through its watch entry) until the copy has landed, so
// an entry dropped from the table is unmapped only after its last use.
class PeerMapping {
 public:
  virtual ~PeerMapping() = default;
  virtual char* base() const = 0;
  virtual uint64_t size() const = 0;
};

class PeerMemory {
 public:
  static PeerMemory& instance();

  // The mapping holding the bytes `info` describes; their address is
  // (*out)->base() + info.offset.
  [[nodiscard]] Status map(rt::Runtime* runtime, const PeerRef& peer, const PostInfo& info,
                           std::shared_ptr<PeerMapping>* out);
  // Drops the table's mappings of one communicator's staging blocks.
  void forgetCommunicator(uint64_t commKey);

 private:
  PeerMemory() = default;
};

}  // namespace ferry
