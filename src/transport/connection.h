// SM-free point-to-point connections (DESIGN.md layer 5): per peer, one
// SendConnection (this rank -> peer) and one RecvConnection (peer -> this
// rank), each with a control block in host shared memory (ctrl_block.h), a
// FIFO of chunk slots in the receiver's memory, and the proxy's own stream.
//
// Ownership: the Communicator owns its P2pConnections; the proxy thread reads
// and writes the "proxy state" fields of a connection only while it holds
// posted operations of that communicator, and the communicator detaches from
// the proxy before it frees connections. "User state" fields are touched only
// by the thread that owns the communicator (enqueue).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "proxy/rpc.h"
#include "runtime/runtime.h"
#include "transport/ctrl_block.h"
#include "transport/shared_memory.h"

namespace ferry {

struct P2pOp;

enum class TransportId : uint32_t { None = 0, P2p = 1, Shm = 2 };
const char* transportName(TransportId id);

// Per-peer traffic counters (relaxed atomics: statistics, read at any time).
struct PeerCounters {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> zeroCopyOps{0};
};

// What both directions share: the control block mapping and its registration.
// Shared (not unique) so that a self connection's two sides use ONE mapping
// and registration of their block instead of registering the same pages
// twice through two mappings (NOTES.md trap 7).
struct CtrlMapping {
  std::shared_ptr<SharedRegion> region;
  std::shared_ptr<rt::HostRegistration> registration;
  CtrlBlock* ctrl = nullptr;

  // The address stream operations use for a word of this control block.
  uint64_t* dev(CtrlWord& word) const;
};

struct ConnectionBase {
  bool isSend = false;  // SendConnection (this rank sends) or RecvConnection
  int peer = -1;
  int device = -1;  // this rank's device (the proxy selects it before issuing)
  TransportId transport = TransportId::None;
  bool samePeerProcess = false;
  uint32_t nslots = 0;
  uint64_t chunkBytes = 0;
  CtrlMapping ctrl;
  std::unique_ptr<rt::Stream> stream;  // the proxy's copy stream
  PeerCounters counters;
  // User state: sequence number of the next message enqueued.
  uint64_t nextSeq = 0;
  // Proxy state: posted operations in order, the chunk counter, and the
  // first failure (after which every operation on the connection fails).
  std::deque<P2pOp*> queue;
  uint64_t chunks = 0;
  Status failed = ncclSuccess;
  // The link to the peer process's proxy (not owned; null for peers in this
  // process): its closing means the peer process died.
  RpcClient* peerLink = nullptr;
};

struct ZeroCopyMapping {
  std::unique_ptr<rt::IpcMapping> mapping;
  uint8_t handle[64] = {0};  // the IPC handle it was opened from
};

struct SendConnection : ConnectionBase {
  SendConnection() { isSend = true; }
  char* peerFifo = nullptr;                     // the receiver's slots, as mapped here
  std::unique_ptr<rt::IpcMapping> fifoMapping;  // when mapped from another process
  std::unique_ptr<SharedRegion> fifoShared;     // SHM transport: host FIFO mapping
  std::unique_ptr<rt::HostRegistration> fifoRegistration;
  std::unique_ptr<RpcClient> rpc;  // to the peer process's proxy
  // Proxy state: zero-copy mappings of the peer's allocations, by id.
  std::map<uint64_t, ZeroCopyMapping> zeroCopyMaps;
};

struct RecvConnection : ConnectionBase {
  std::unique_ptr<rt::DeviceMemory> fifoDevice;  // P2P transport
  std::unique_ptr<SharedRegion> fifoShared;      // SHM transport
  std::unique_ptr<rt::HostRegistration> fifoRegistration;
  char* fifo = nullptr;  // address of slot 0 for this process's copies
};

// Every connection of one communicator (indexed by peer rank; the self
// connection included; null where no transport reaches the peer).
struct P2pState {
  std::vector<std::unique_ptr<SendConnection>> send;
  std::vector<std::unique_ptr<RecvConnection>> recv;
};

}  // namespace ferry
