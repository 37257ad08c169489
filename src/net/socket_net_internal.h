// Internals of the socket network engine (net/socket_net.h): wire formats,
// the per-connection comm with its helper threads, the listener's sorting of
// incoming sockets and the sender's non-blocking connect.
//
// Wire formats (little-endian, encoded field by field):
//   listen handle (first 36 of kNetHandleBytes, the rest zero):
//     u64 magic | u32 version | u16 family | u16 port | 16 B ip | u32 scope id
//   hello, first 32 bytes on every socket of a connection (sender -> receiver):
//     u64 magic | u32 version | u16 index | u16 count | u16 nThreads |
//     u16 reserved (0) | u32 reserved (0) | u64 connection id
//     index 0 is the control socket, 1..count-1 the data sockets, grouped by
//     helper thread (count - 1 = nThreads x sockets per thread).
//   control frame, one per isend on the control socket:
//     u32 kCtrlTag | u32 sequence (low 32 bits) | u64 size
// Data sockets carry raw chunk bytes; chunk i of the k-th message travels on
// data socket (base_k + i) % nData, where base advances by each message's
// chunk count, so both ends derive the same placement from the sizes alone.
//
// Threading: a Comm is driven by the proxy thread (post/test/close) and the
// helper threads (Worker) that serve its lanes, its own or the engine's
// shared ones (WorkerPool); the fields each side may touch are marked below.
// ListenComm and Connector belong to the proxy thread only.
#pragma once

#include <cstdarg>

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "core/fd.h"
#include "core/status.h"
#include "net/socket_net.h"

namespace ferry::net::sock {

constexpr uint64_t kMagic = 0x3174654e79727246ull;  // "FrryNet1" read little-endian
// 2: messages of up to kInlineBytes travel on the control stream.
// 3: kInlineBytes 16 KiB -> 64 KiB.
constexpr uint32_t kVersion = 3;
constexpr size_t kHandleUsedBytes = 36;
constexpr size_t kHelloBytes = 32;
constexpr size_t kCtrlBytes = 16;
constexpr uint32_t kCtrlTag = 0x4d53464eu;  // "NFSM"
constexpr uint64_t kMinChunkBytes = 64 * 1024;
// A message this small follows its announcement on the control stream,
// written and read by the proxy thread inside post/test: no hand-off to a
// helper thread on either side (two thread wake-ups per small message).
// On 2x H200 over loopback a 4 KiB sendrecv across hosts took 32 us inline
// and a 32 KiB one 164 us through the helpers (session 20); 64 KiB keeps
// the ring's 256 KiB slots of a 4 MiB all-reduce on the helpers (the proxy
// would otherwise copy every byte of mid-size collectives itself).
constexpr uint64_t kInlineBytes = 64 * 1024;
inline bool isInline(uint64_t size) {
  return size <= kInlineBytes;
}
constexpr int kMaxThreads = 16;
constexpr int kMaxSocksPerThread = 16;
constexpr int kMaxDataSocks = 64;
// Outstanding requests per comm (each way); a post beyond it answers "not now".
constexpr int kMaxRequests = 128;

// ------------------------------------------------------------ wire (wire.cc)

void encodeHandle(const boot::SocketAddress& addr, void* out);
// ncclInvalidArgument (with a WARN) for a handle that is not ours.
[[nodiscard]] Status decodeHandle(const void* in, boot::SocketAddress* out);

struct Hello {
  uint64_t connId = 0;
  uint32_t index = 0;
  uint32_t count = 0;  // sockets of the connection, control included
  uint32_t nThreads = 0;
};
void encodeHello(const Hello& h, uint8_t out[kHelloBytes]);
// False (with the reason in *why) for anything but a well-formed hello.
bool decodeHello(const uint8_t* in, Hello* out, std::string* why);
// Whether the first `n` (< 8) received bytes can still begin our magic.
bool magicPrefixOk(const uint8_t* in, size_t n);

void encodeCtrl(uint32_t seq, uint64_t size, uint8_t out[kCtrlBytes]);
bool decodeCtrl(const uint8_t* in, uint32_t* seq, uint64_t* size);

// How a message of `size` bytes is cut over `nData` sockets.
void planChunks(uint64_t size, int nData, uint64_t* chunkBytes, uint32_t* nChunks);

// A random, non-zero 64-bit connection id.
uint64_t newConnectionId();

// Outcome of one non-blocking send/recv on a stream socket.
enum class IoResult { kProgress, kWouldBlock, kClosed, kError };
// *moved gets the byte count; *err the errno for kClosed (0 for an orderly
// close) and kError.
IoResult sendSome(int fd, const void* data, size_t bytes, size_t* moved, int* err);
IoResult recvSome(int fd, void* data, size_t bytes, size_t* moved, int* err);

// --------------------------------------------------------- comm (comm.cc)

class Comm;

// One isend or irecv. Lives in its comm's ring until test() reports it.
struct Request {
  // Proxy thread only.
  Comm* comm = nullptr;
  bool inUse = false;
  uint64_t seq = 0;
  uint8_t* data = nullptr;
  uint64_t capacity = 0;       // receive buffer size (sends: the message size)
  uint64_t size = 0;           // bytes of the message (receives: as announced)
  bool ctrlDone = false;       // sends: announced; receives: announcement read, chunks posted
  Status error = ncclSuccess;  // this request's own failure (a truncated receive)
  // Written by the proxy before the chunks are posted (the workers' mutex
  // publishes it); the workers never read it.
  uint32_t nChunks = 0;
  // Chunks finished or abandoned by the helper threads. Each worker adds with
  // release after its last access to the chunk's bytes and to this request;
  // the proxy loads with acquire before reporting the request, so the caller
  // sees every received byte and may reuse the buffer. The increments form
  // one release sequence, so reading the final count syncs with all of them.
  std::atomic<uint32_t> settled{0};
  // Chunks abandoned after a failure; written before the `settled` release
  // that publishes them.
  std::atomic<uint32_t> failedChunks{0};
};

class Lane;
class Worker;

// A chunk of one request on one of a lane's sockets.
struct Task {
  Lane* lane = nullptr;
  Request* req = nullptr;
  uint8_t* ptr = nullptr;
  uint64_t len = 0;
  uint64_t done = 0;
  int sock = 0;  // index among the lane's sockets
};

// What one lane saw, for the INFO line its comm writes when it closes
// (where a striped connection's time goes without TRACE, trap 46): bytes
// moved and the longest time one of its sockets had a chunk queued but could
// not move a byte (the peer or TCP held it up).
struct LaneStats {
  uint64_t bytes = 0;
  int64_t maxSocketWaitNs = 0;
  int maxWaitSocket = -1;  // index among the comm's data sockets
};

// What a helper thread saw: its wall time moving bytes, the CPU time it got
// (well below the wall time: the thread was runnable but not running), its
// time spinning for work and its sleeps that outlasted work posted meanwhile.
struct WorkerStats {
  int64_t busyNs = 0;
  int64_t cpuNs = 0;
  int64_t spinNs = 0;  // polling for work instead of sleeping (FERRY_NET_HELPER_SPIN_US)
  uint64_t lateWakeups = 0;
};

// Late wake-ups of every helper thread so far (socketNetLateWakeups).
uint64_t lateWakeups();
// "cpu C/B ms, spin S ms" (CPU time / busy wall time), as the INFO lines
// print a helper's statistics.
std::string describeWorkerStats(const WorkerStats& st);

// One comm's group of NCCL_NSOCKS_PERTHREAD data sockets, served by one
// helper thread: the comm's own (per-connection helpers, NCCL's shape) or
// one of the engine's shared ones (FERRY_NET_SHARED_HELPERS).
class Lane {
 public:
  Lane(Comm* owner, int laneIndex, std::vector<int> sockets, bool isSend)
      : comm(owner),
        index(laneIndex),
        fds(std::move(sockets)),
        send(isSend),
        queues(fds.size()),
        blockedSinceNs(fds.size(), 0) {}
  // Fixed at construction; `fds` are borrowed from the comm, which detaches
  // the lane from its worker before closing them.
  Comm* const comm;
  const int index;
  const std::vector<int> fds;
  const bool send;
  // Written by the comm's proxy thread before the lane is attached (the
  // worker's mutex publishes it); read by any thread that wakes the lane's
  // worker after that.
  Worker* worker = nullptr;
  // The worker thread's while attached; the comm's after detach() returned
  // (its mutex orders the thread's last writes first).
  std::vector<std::deque<Task>> queues;
  std::vector<int64_t> blockedSinceNs;  // per socket: first would-block, 0 when moving
  LaneStats stats;
};

// A helper thread moving the chunks queued on the sockets of its lanes
// (worker.cc). Lanes come and go while it runs (attach / detach).
class Worker {
 public:
  // spinNs: how long the thread keeps polling its sockets and its queue
  // after its last progress before it sleeps in poll().
  Worker(int index, int64_t spinNs);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Creates the wake-up eventfd; launch() then starts the thread.
  [[nodiscard]] Status open();
  [[nodiscard]] Status launch();
  bool launched() const { return thread_.joinable(); }
  // Proxy thread: the lane's sockets join the thread's set (in order with
  // posts: a lane's tasks are posted after its attach).
  void attach(Lane* lane);
  // Proxy thread: returns once the thread no longer touches the lane; its
  // queued chunks are dropped unsettled (its comm is going away).
  void detach(Lane* lane);
  // Proxy thread: hands over chunks (under the mutex, which publishes the
  // tasks and their requests' fields) and wakes the thread unless it is
  // awake and spinning for work.
  void post(std::vector<Task>* tasks);
  // Any thread: interrupts the worker's poll (new work, failure or stop).
  void wake();
  // Stops the thread (if it runs) and joins it.
  void stop();
  int index() const { return index_; }
  // After stop() (which orders the thread's writes before this read).
  const WorkerStats& stats() const { return stats_; }
  // Any thread: the statistics as of the thread's last acknowledged
  // detach (zero before any).
  WorkerStats publishedStats();

 private:
  void notify();
  void run();
  bool takeIncoming();
  bool progressLane(Lane& lane, int64_t nowNs);
  bool progressSocket(Lane& lane, int s, int64_t nowNs);
  bool progressAll(int64_t nowNs);
  static void dropLane(Lane& lane);
  void dropFailedLanes();
  nfds_t buildPollSet();
  void spinBriefly();
  void sleepForWork();
  void waitForWork(int64_t lastActiveNs);

  const int index_;
  const int64_t spinNs_;
  UniqueFd wakeFd_;
  std::mutex mu_;
  std::condition_variable detached_;
  // Guarded by mu_: lanes to attach and detach, tasks to take.
  std::vector<Lane*> attachQ_;
  std::vector<Lane*> detachQ_;
  std::vector<Task> incoming_;
  std::vector<Lane*> gone_;  // detached by the thread, not yet acknowledged
  WorkerStats published_;    // stats_ as of the last acknowledged detach
  // Set (release) by stop(); the thread's loop reads it (acquire).
  std::atomic<bool> stop_{false};
  // The post()/sleep hand-shake (a Dekker pair, both sides seq_cst): post()
  // sets hasWork_ and then reads sleeping_; the thread sets sleeping_ and
  // then reads hasWork_ before it sleeps. At least one of them sees the
  // other's store, so either the thread finds the work or post() writes the
  // eventfd: no wake-up is lost, and a spinning thread costs post() no
  // syscall. attach/detach/stop use the same hand-shake.
  std::atomic<bool> hasWork_{false};
  std::atomic<bool> sleeping_{true};
  // Thread-private once the thread runs.
  std::vector<Lane*> lanes_;
  std::vector<pollfd> pfds_;
  WorkerStats stats_;
  std::thread thread_;
};

// The engine's shared helper threads (FERRY_NET_SHARED_HELPERS > 0): every
// comm's lanes spread over them round robin, so a few threads that stay busy
// (and warm) serve all connections instead of a few mostly sleeping threads
// per connection (trap 78). Proxy thread only (the engine's calls are
// serialized).
class WorkerPool {
 public:
  WorkerPool(int nThreads, int64_t spinNs);
  // Stops and joins the threads (~Worker): every comm must have detached
  // first, and released() has logged their statistics.
  ~WorkerPool() = default;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  // The worker for a comm's next lane, its thread started on first use.
  [[nodiscard]] Status assign(Worker** out);
  // A closing comm's `lanes` assigned lanes have detached; once none is
  // left, the threads' statistics go to one INFO line (NET).
  void released(int lanes);
  int size() const { return static_cast<int>(workers_.size()); }

 private:
  std::vector<std::unique_ptr<Worker>> workers_;
  size_t next_ = 0;
  int lanes_ = 0;  // assigned and not yet released
};

// A registered memory region (regMr); the handle given to the caller.
struct MemRegion {
  void* data = nullptr;
  size_t size = 0;
};

// One direction of a connection: the send side or the receive side.
class Comm {
 public:
  // helperSpinUs: SocketNetTuning::helperSpinUs (resolved, >= 0).
  Comm(bool send, SocketNetLayout layout, int64_t helperSpinUs, boot::Socket ctrl,
       std::vector<boot::Socket> data, std::string peer);
  // Stops and joins the workers before any socket or request goes away.
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  [[nodiscard]] Status start();
  // Before the first message: serve the lanes with the engine's shared
  // helper threads instead of the comm's own.
  void usePool(WorkerPool* pool) { pool_ = pool; }
  bool isSend() const { return send_; }
  SocketNetLayout layout() const { return layout_; }
  const std::string& peer() const { return peer_; }

  // Proxy thread. A null *out means the request ring is full: try later.
  [[nodiscard]] Status post(void* data, uint64_t bytes, Request** out);
  [[nodiscard]] Status test(Request* r, int* done, size_t* size);
  [[nodiscard]] Status registerMemory(void* data, size_t size, void** handle);
  [[nodiscard]] Status deregisterMemory(void* handle);

  // Any thread: records the first failure (WARN once) and wakes the workers.
  void fail(Status s, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
  // The same for the peer closing its end at a message boundary (INFO only).
  void closedByPeer(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  void failWith(Status s, bool loud, const char* fmt, va_list ap);
  // The first failure, ncclSuccess while healthy. Acquire: pairs with fail().
  Status failure() const { return static_cast<Status>(failure_.load(std::memory_order_acquire)); }

 private:
  void progress();
  void progressSendCtrl();
  void progressRecvCtrl();
  bool readAnnouncement(Request& r);
  void finishRecvCtrl(Request& r);
  void checkPeerAlive();
  void dispatch(Request* r);
  // Starts the helper threads once (false: they could not start; the comm
  // failed). Proxy thread only.
  bool startWorkers();
  void stopWorkers();
  void logWorkerStats() const;
  Request& slot(uint64_t seq) { return ring_[seq % kMaxRequests]; }

  const bool send_;
  const SocketNetLayout layout_;
  const int64_t helperSpinNs_;
  const std::string peer_;
  boot::Socket ctrl_;
  std::vector<boot::Socket> data_;
  std::unique_ptr<Request[]> ring_;
  std::vector<std::unique_ptr<MemRegion>> regions_;
  // Proxy thread only: sequence numbers posted / announced, the control
  // frame in progress, the next chunk placement.
  uint64_t posted_ = 0;
  uint64_t ctrlSeq_ = 0;
  uint8_t ctrlBuf_[kCtrlBytes] = {};
  size_t ctrlOff_ = 0;
  int nextSock_ = 0;
  // Receive side: the sender closed its end at a message boundary. The
  // messages it announced before still arrive on the data sockets (the
  // helpers read them as usual); receives posted beyond them fail.
  bool peerClosed_ = false;
  bool workersStarted_ = false;
  WorkerPool* pool_ = nullptr;              // the engine's, which outlives its comms
  std::vector<std::vector<Task>> batches_;  // per lane
  // Set once (first failure wins, compare-exchange acq_rel), read by all.
  std::atomic<int> failure_{0};
  // The lanes never change once start() made them (fail() on any thread
  // walks them); each lane's worker pointer is set before any thread can
  // see the lane (startWorkers).
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Per-connection helpers (no pool); declared last: destroyed first,
  // although the destructor stops them already.
  std::vector<std::unique_ptr<Worker>> ownWorkers_;
};

// --------------------------------------------- connection set-up (setup.cc)

// The listener: accepts sockets, reads their hellos without ever blocking,
// sorts them into connections by id, drops strangers.
class ListenComm {
 public:
  ListenComm(boot::Socket listener, const SocketNetTuning& tuning);
  // A complete connection in *out, or null when none is ready yet.
  [[nodiscard]] Status accept(std::unique_ptr<Comm>* out);
  size_t pendingSockets() const { return pending_.size(); }

 private:
  struct Pending {
    boot::Socket sock;
    boot::SocketAddress peer;
    boot::Deadline deadline;
    uint8_t hello[kHelloBytes] = {};
    size_t got = 0;
  };
  struct Group {
    Hello first;
    std::vector<boot::Socket> socks;  // by index; invalid until arrived
    uint32_t arrived = 0;
    boot::Deadline deadline;
    boot::SocketAddress peer;
    uint64_t order = 0;  // arrival order, to evict the oldest
  };
  [[nodiscard]] Status acceptNew();
  [[nodiscard]] Status pumpOne(Pending& p, bool* finished);
  [[nodiscard]] Status place(Pending& p, const Hello& h);
  [[nodiscard]] Status completeGroup(Group& g);
  void expire();

  boot::Socket listener_;
  SocketNetTuning tuning_;
  std::vector<Pending> pending_;
  std::map<uint64_t, Group> groups_;
  uint64_t groupOrder_ = 0;
  std::deque<std::unique_ptr<Comm>> ready_;
};

// The sender's side of connect(): opens the control and data sockets and
// writes their hellos, a little more on every call.
class Connector {
 public:
  Connector(const boot::SocketAddress& addr, SocketNetLayout layout, const SocketNetTuning& tuning);
  // Success with a null *out until every socket is connected and greeted.
  [[nodiscard]] Status progress(std::unique_ptr<Comm>* out);

 private:
  enum class State { kIdle, kConnecting, kGreeting, kDone };
  struct Slot {
    boot::Socket sock;
    State state = State::kIdle;
    boot::Deadline retryAt;  // kIdle: when to (re)try
    int64_t backoffMs = 1;
    uint8_t hello[kHelloBytes] = {};
    size_t sent = 0;
  };
  [[nodiscard]] Status startSlot(Slot& s);
  [[nodiscard]] Status pollConnecting();
  [[nodiscard]] Status greet(Slot& s);
  [[nodiscard]] Status retryLater(Slot& s, int err);

  boot::SocketAddress addr_;
  SocketNetLayout layout_;
  boot::Deadline deadline_;
  SocketNetTuning tuning_;
  std::vector<Slot> slots_;
};

}  // namespace ferry::net::sock
