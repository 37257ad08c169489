// What the proxy thread does for point-to-point messages over the network
// (TransportId::Net; the whole protocol is in enqueue/p2p_net.cc's header
// comment). The user's thread has already submitted every GPU operation of
// the message in its call; the proxy only moves bytes between the
// connection's host memory and the network engine, and tells the streams
// through host words (transport/net_buffers.h), which they wait on:
//   send: chunk k goes to the engine (isend) once `filled` says the copy
//     stream has staged it; once the engine has taken the whole message,
//     `sent` = seq + 1 frees its staging block;
//   receive: chunk k is received (irecv) into the message's staging block
//     at k x chunk; each chunk that lands advances `arrived` (after its
//     size is checked).
// A message's last chunk carries an 8-byte trailer after its bytes (the
// message's size, scrambled with kNetTrailerMagic), so a receive whose send
// has a different size fails with a clear error instead of taking another
// message's bytes. With FERRY_NET_GDR (an engine that takes device memory)
// a message's other chunks go straight from the sender's buffer and into
// the receiver's (NetOp::direct); a direct receive posts them only once its
// stream has reached the receive (`ready`), its last chunk (with the
// trailer) still lands in staging, and before `arrived` lets the stream
// read the message, each link that carried direct chunks flushes them
// (iflush, as NCCL does for GPUDirect receives). The wire format is the
// same either way, so each side chooses alone.
//
// Striping: a connection has L links (comms; FERRY_NET_LINKS, agreed by all
// ranks) and chunk k travels on link k % L on both sides. Chunk numbers are
// connection-wide, so each link carries a sub-sequence of chunks in the same
// order at both ends, which is how the engine matches them (in order per
// comm). Links run independently: each posts its own chunks, in its own
// order, with its own window of pending requests, and every pass tests the
// oldest pending request of each link (a plugin may progress a comm only
// when it is tested). A link that stalls therefore holds up only its own
// chunks; the others run ahead within the posted messages (a shared window,
// as before session 21, let one slow link stop them all, and the receiving
// side's stop then stalled the sender's sockets too). Chunks are retired --
// counters advanced, ops finished -- in chunk order, so the counters stay
// monotonic.
//
// Failure (an engine error: the peer died or reset the connection; a size
// mismatch; FERRY_P2P_TIMEOUT; abort): the connection fails for good, its
// comms are closed (so the peer's requests fail too), and this rank's words
// are released (kReleased) so its streams run on instead of waiting.
//
// Threading: proxy thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "transport/connection.h"

namespace ferry {

// The number of chunks a message of `bytes` takes (at least one: a
// zero-byte message still travels, so that message counts stay matched).
inline uint64_t netChunks(uint64_t bytes, uint64_t chunkBytes) {
  return bytes == 0 ? 1 : (bytes + chunkBytes - 1) / chunkBytes;
}

constexpr uint64_t kNetTrailerBytes = 8;
constexpr uint64_t kNetTrailerMagic = 0x4e6574466572726fULL;  // "NetFerro"

struct NetOp {
  const void* owner = nullptr;  // the engine (detach)
  ConnectionBase* conn = nullptr;
  uint64_t seq = 0;         // message number on the connection
  char* data = nullptr;     // the message's staging block (only its last chunk when direct)
  uint64_t blockBytes = 0;  // its size (>= bytes + the trailer)
  NetMhandles mhandles{};   // data's registration on each of conn's links
  // FERRY_NET_GDR: every chunk but the last goes between the user's buffer
  // and the network directly (null: all through `data`).
  char* direct = nullptr;
  NetMhandles directMh{};  // direct's allocation, registered on each link
  uint64_t bytes = 0;
  uint64_t chunkBytes = 0;
  uint64_t firstChunk = 0;                    // connection-wide number of the message's chunk 0
  std::atomic<Status>* asyncError = nullptr;  // the communicator's
  int64_t timeoutNs = 0;                      // FERRY_P2P_TIMEOUT; 0: none
  uint64_t reuseAfter = 0;  // receive: land nothing before `drained` >= this (a reused block)
  int64_t postedNs = 0;

  // Proxy state: chunks completed (retired in order); when its first chunk
  // went to the engine (-1: not yet; NetStats' message timeline).
  uint64_t done = 0;
  int64_t firstPostNs = -1;

  uint64_t chunks() const { return netChunks(bytes, chunkBytes); }
  bool last(uint64_t k) const { return k + 1 == chunks(); }
  // Bytes of the message in chunk k, and what travels (the trailer too).
  uint64_t chunkSize(uint64_t k) const { return last(k) ? bytes - k * chunkBytes : chunkBytes; }
  uint64_t wireSize(uint64_t k) const { return chunkSize(k) + (last(k) ? kNetTrailerBytes : 0); }
  bool directChunk(uint64_t k) const { return direct != nullptr && !last(k); }
  // Where chunk k's bytes are read from (send) or land (receive): the user's
  // buffer for a direct chunk; else the staging block, which holds the
  // whole message or, when direct, only the last chunk (at its start).
  char* chunkAt(uint64_t k) const {
    if (directChunk(k)) return direct + k * chunkBytes;
    return data + (direct != nullptr ? 0 : k * chunkBytes);
  }
  void* mhandleOf(uint64_t k, size_t link) const {
    return directChunk(k) ? directMh[link] : mhandles[link];
  }
};

class NetProgress {
 public:
  // `finished` is told each op that leaves (done, failed or dropped).
  explicit NetProgress(std::function<void(const NetOp&)> finished)
      : finished_(std::move(finished)) {}

  void add(NetOp op);
  // One pass over every connection: tests what is in flight, posts what may
  // go, checks timeouts. Returns whether anything moved.
  bool step(int64_t nowNs);
  bool empty() const { return conns_.empty(); }
  // Abort: fails every connection that carries a message of `owner`.
  void dropOwner(const void* owner);
  // Every op is failed and dropped (the proxy is stopping).
  void dropAll();

 private:
  struct InFlight {
    void* request = nullptr;
    uint64_t chunk = 0;  // connection-wide chunk number
    bool done = false;   // the engine reported it (never test it again)
    size_t size = 0;     // what arrived (receives), once done
  };
  struct LinkState {
    uint64_t next = 0;   // connection-wide chunk this link posts next
    size_t pending = 0;  // its requests posted and not yet done
    // What stopped its last posting pass, and since when (ns; -1: never
    // posted yet): the time goes to NetStats::stopNs when the cause changes.
    NetStop stop = NetStop::NoMessage;
    int64_t since = -1;
  };
  struct ConnState {
    ConnectionBase* conn = nullptr;
    std::deque<NetOp> ops;  // in message order; ops.front() completes next
    // One slot per chunk from `base` (the oldest not retired) up to the
    // highest posted one; links post out of chunk order, retirement is in it.
    std::deque<InFlight> requests;
    uint64_t base = 0;
    std::vector<LinkState> links;
  };

  [[nodiscard]] Status testRequests(ConnState& c, int64_t nowNs, bool* moved);
  [[nodiscard]] Status testLinks(ConnState& c, bool* moved);
  [[nodiscard]] Status testFailed(ConnState& c, const InFlight& f, Status s);
  [[nodiscard]] Status retire(ConnState& c, const InFlight& f, int64_t nowNs);
  // A message's timeline into NetStats, as it completes.
  static void noteMessage(ConnState& c, const NetOp& op, int64_t nowNs);
  // A direct receive's chunks are in GPU memory: each link flushes them.
  [[nodiscard]] Status flushDirect(ConnState& c, const NetOp& op);
  // The op that connection-wide chunk `chunk` belongs to; null when no
  // posted message has it yet.
  static NetOp* opOf(ConnState& c, uint64_t chunk);
  [[nodiscard]] Status postChunks(ConnState& c, int64_t nowNs, bool* moved);
  // Posts link l's chunks while it may; `*why` says what stopped it.
  [[nodiscard]] Status postLink(ConnState& c, size_t l, int64_t nowNs, bool* moved, NetStop* why);
  // The time since the link's cause last changed goes to that cause:
  // chargeStop adds it, noteStop does when `why` differs and starts anew,
  // closeStops does for every link of a connection going idle.
  static void chargeStop(ConnState& c, const LinkState& ls, int64_t nowNs);
  static void noteStop(ConnState& c, LinkState& ls, NetStop why, int64_t nowNs);
  static void closeStops(ConnState& c, int64_t nowNs);
  [[nodiscard]] Status checkTimeout(const ConnState& c, int64_t nowNs);
  void fail(ConnState& c, Status s, bool warn);

  std::function<void(const NetOp&)> finished_;
  std::vector<std::unique_ptr<ConnState>> conns_;
};

}  // namespace ferry
