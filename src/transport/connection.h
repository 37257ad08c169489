// SM-free point-to-point connections (DESIGN.md layer 5): per peer, one
// SendConnection (this rank -> peer) and one RecvConnection (peer -> this
// rank), each with a control block in host shared memory (ctrl_block.h) and
// a copy stream of this rank's device on which the side that arrives second
// for a message copies it. A peer on another host is reached through the
// process's network engine instead (TransportId::Net, transport/net_link.h):
// such a connection has no control block and no RPC link to the peer's
// proxy (it lives on the other host); its data path (enqueue/p2p_net.cc)
// stages through pinned host memory (transport/net_buffers.h) that the
// proxy hands to the engine.
//
// Ownership: the Communicator owns its P2pConnections. The user thread that
// owns the communicator claims messages and submits their work; the proxy
// thread reads the control block and `failed`, and writes `failed` and the
// words this rank waits on when a connection fails, only while it watches
// messages of that communicator (the communicator detaches from the proxy
// before it frees connections).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "proxy/rpc.h"
#include "runtime/runtime.h"
#include "transport/ctrl_block.h"
#include "transport/net_buffers.h"
#include "transport/net_link.h"
#include "transport/shared_memory.h"

namespace ferry {

enum class TransportId : uint32_t { None = 0, P2p = 1, Shm = 2, Net = 3 };
const char* transportName(TransportId id);

// Per-peer traffic counters (relaxed atomics: statistics, read at any time).
struct PeerCounters {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> zeroCopyOps{0};
  // Messages this rank copied as the second side (a push on a send
  // connection, a pull on a receive connection).
  std::atomic<uint64_t> copiedOps{0};
  // Send side: push waits (P2pEngine::awaitReceiver) and those the
  // receiver did not answer in time.
  std::atomic<uint64_t> pushWaits{0};
  std::atomic<uint64_t> pushWaitsMissed{0};
};

// Network connections (TransportId::Net): what kept each link of the
// connection from posting its next chunk, while the connection had
// messages (ns, summed over links), and for sends how many chunks were
// staged but not yet posted each time one was posted (how far the staging
// copies ran ahead of the network). Written by the proxy thread, read at
// destroy (relaxed atomics: statistics).
enum class NetStop : uint8_t {
  Window,     // the link's window of pending requests was full: the network's pace
  Engine,     // the engine said "not now"
  NoMessage,  // no posted message has the link's next chunk: the user's pace
  Unstaged,   // send: the copy stream has not staged the chunk yet
  BlockBusy,  // receive: the message's staging block is not drained yet
  NotReady,   // direct receive: the user's stream has not reached it
  kCount
};
const char* netStopName(NetStop s);

struct NetStats {
  std::atomic<uint64_t> stopNs[static_cast<size_t>(NetStop::kCount)] = {};
  std::atomic<uint64_t> posts{0};
  std::atomic<uint64_t> aheadSum{0};  // sends: staged chunks not yet posted, summed at each post
  std::atomic<uint64_t> aheadMax{0};
  // Per message, summed (NetProgress::noteMessage): the proxy's take to its
  // first chunk posted, first chunk posted to last done, and the gap from
  // the connection's previous message's end to this one's first chunk.
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> firstOutNs{0};
  std::atomic<uint64_t> wireNs{0};
  std::atomic<uint64_t> gapNs{0};
  std::atomic<int64_t> lastDoneNs{-1};  // the previous message's end (proxy's clock)
};

// " net links: window full 12.3 ms, not staged 40.1 ms; 128 chunks posted,
// staged ahead avg 9.5 max 64; 8 messages, avg us: first chunk out 310.2,
// wire 820.5, gap after the previous 95.0" (causes with no time left out;
// staging figures for sends only); empty when nothing was posted.
std::string describeNetStats(const NetStats& s, bool isSend);

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
  int device = -1;  // this rank's device
  TransportId transport = TransportId::None;
  bool samePeerProcess = false;
  std::string peerProxy;  // the peer process's RPC name (its identity); empty for Net
  CtrlMapping ctrl;       // empty (ctrl.ctrl null) for TransportId::Net
  // Copies this rank makes as the second side. Net connections have one
  // too, unused so far: P2pEngine::shutdown synchronizes the stream of every
  // connection it holds.
  std::unique_ptr<rt::Stream> stream;
  PeerCounters counters;
  NetStats netStats;  // TransportId::Net only
  // User state: sequence number of the next message enqueued.
  uint64_t nextSeq = 0;
  // Send side, user state: push waits in a row that the receiver did not
  // answer in time, messages since the last wait, and how many messages a
  // receiver late by habit lets pass between two waits (0: the first
  // interval, P2pEngine::awaitReceiver).
  uint32_t lateReceives = 0;
  uint32_t sinceWait = 0;
  uint32_t retryEvery = 0;
  // The first failure (proxy thread or user thread); every later message
  // on the connection fails.
  std::atomic<Status> failed{ncclSuccess};
  // The link to the peer process's proxy (not owned; null for peers in this
  // process and on other hosts): its closing means the peer process died.
  // Proxy thread only.
  RpcClient* peerLink = nullptr;
  // TransportId::Net only (empty / null otherwise): the engine's comms with
  // the peer (FERRY_NET_LINKS of them: chunk k of the connection travels on
  // net[k % net.size()]), and the data path's memory. Declared after `net`:
  // destroyed first (its registrations go before the comms close).
  std::vector<std::unique_ptr<NetLink>> net;
  std::unique_ptr<NetBuffers> netBuffers;
  uint64_t nextChunk = 0;  // Net, user state: chunk number of the next message's first chunk
};

struct SendConnection : ConnectionBase {
  SendConnection() { isSend = true; }
  // To the peer's proxy (null for TransportId::Net): setup, then the proxy's peerLink.
  std::unique_ptr<RpcClient> rpc;
  std::unique_ptr<RpcClient> userRpc;  // to the peer's proxy: fetches by the user thread
};

struct RecvConnection : ConnectionBase {};

// Every connection of one communicator (indexed by peer rank; the self
// connection included; null where no transport reaches the peer).
struct P2pState {
  // The network connections' staging blocks (setupP2p makes it, empty until
  // a message across hosts needs one). Declared first: it outlives every
  // connection that registered its blocks.
  std::unique_ptr<NetBlockPool> netPool;
  std::vector<std::unique_ptr<SendConnection>> send;
  std::vector<std::unique_ptr<RecvConnection>> recv;
};

}  // namespace ferry
