#include "comm/liveness.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "core/log.h"

namespace ferry {
namespace {

constexpr uint32_t kFrameMagic = 0x564c5246;  // "FRLV"
constexpr int kPollMs = 100;                  // bounds how late a heartbeat or a check runs
constexpr size_t kMaxQueuedBytes = 4096;      // a neighbour that reads nothing gets no more beats
constexpr int64_t kStallMs = 1500;  // a gap this long in the loop: this process was stopped

enum class FrameKind : uint16_t { Hello = 1, Heartbeat = 2, Bye = 3, Dead = 4 };
enum class Cause : uint16_t { None = 0, Closed = 1, Silent = 2, Malformed = 3 };

// Every message of the ring is one fixed-size frame; `check` (the low bits
// of the communicator's key) catches a frame on the wrong connection.
struct Frame {
  uint32_t magic = kFrameMagic;
  uint16_t kind = 0;
  uint16_t cause = 0;
  int32_t subject = -1;  // Hello: the sender; Dead: the rank found dead
  uint32_t check = 0;
};
static_assert(sizeof(Frame) == 16, "liveness frames are 16 bytes on the wire");

uint32_t checkOf(uint64_t key) {
  return static_cast<uint32_t>(key ^ (key >> 32));
}

Frame makeFrame(FrameKind kind, int subject, uint64_t key, Cause cause = Cause::None) {
  Frame f;
  f.kind = static_cast<uint16_t>(kind);
  f.cause = static_cast<uint16_t>(cause);
  f.subject = subject;
  f.check = checkOf(key);
  return f;
}

const char* causeText(uint16_t cause) {
  switch (static_cast<Cause>(cause)) {
    case Cause::Closed:
      return "its connection closed without a goodbye: the process exited or was killed";
    case Cause::Silent:
      return "it stopped answering heartbeats (FERRY_PEER_TIMEOUT)";
    case Cause::Malformed:
      return "it sent a malformed liveness frame";
    case Cause::None:
      break;
  }
  return "unknown cause";
}

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Link {
  int peer = -1;
  boot::Socket sock;
  int64_t lastHeardMs = 0;
  int64_t lastSentMs = 0;
  std::string in;   // bytes of a frame not yet complete
  std::string out;  // frames the socket did not take yet
  bool bye = false;
};

struct RingState {
  uint64_t id = 0;
  LivenessOptions opt;
  std::vector<Link> links;
  std::vector<bool> dead;
};

}  // namespace

// One thread for every ring of the process. Leaked on purpose (never
// destroyed): at exit the atexit hook says goodbye and the thread idles.
class LivenessMonitor {
 public:
  static LivenessMonitor& get();

  uint64_t add(std::unique_ptr<RingState> ring);
  // Says goodbye on the ring's connections and forgets it; waits for a
  // callback in progress (it runs under mu_).
  void remove(uint64_t id);

 private:
  LivenessMonitor();
  void start();
  void loop();
  void collectFds(std::vector<pollfd>* pfds, std::vector<std::pair<uint64_t, size_t>>* owners);
  RingState* find(uint64_t id);
  void readLink(RingState& r, Link& l, int64_t now);
  void handleFrame(RingState& r, Link& l, const Frame& f);
  void linkClosed(RingState& r, Link& l, Cause cause);
  void declare(RingState& r, int peer, const std::string& why, uint16_t cause, const Link* from);
  void queue(RingState& r, Link& l, const Frame& f, int64_t now);
  void flush(RingState& r, Link& l);
  void tick(RingState& r, int64_t now);
  void goodbyeAll();     // atexit
  void forgetInChild();  // pthread_atfork child

  std::mutex mu_;  // guards everything below; held while a callback runs
  std::vector<std::unique_ptr<RingState>> rings_;
  uint64_t nextId_ = 1;
  bool exiting_ = false;    // the process is exiting: no more checks or callbacks
  int64_t lastLoopMs_ = 0;  // when the loop last ran its checks
  pid_t pid_ = 0;           // the process that owns the thread
  UniqueFd wake_;
  bool started_ = false;
};

LivenessMonitor& LivenessMonitor::get() {
  static LivenessMonitor* m = new LivenessMonitor();
  return *m;
}

LivenessMonitor::LivenessMonitor() : pid_(getpid()) {
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  registerLoggerForkHandlers();  // before ours: see log.h (callbacks log under mu_)
  pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); },
                 [] { get().forgetInChild(); });
  std::atexit([] { get().goodbyeAll(); });
}

void LivenessMonitor::start() {
  if (started_) return;
  started_ = true;
  // Detached: the thread idles in poll() until the process ends.
  std::thread([this]() { loop(); }).detach();
}

uint64_t LivenessMonitor::add(std::unique_ptr<RingState> ring) {
  std::lock_guard<std::mutex> lock(mu_);
  start();
  const int64_t now = nowMs();
  for (Link& l : ring->links) l.lastHeardMs = l.lastSentMs = now;
  ring->id = nextId_++;
  uint64_t id = ring->id;
  rings_.push_back(std::move(ring));
  uint64_t one = 1;
  ssize_t n = write(wake_.get(), &one, sizeof(one));  // poll the new sockets now
  (void)n;
  return id;
}

void LivenessMonitor::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(rings_.begin(), rings_.end(),
                         [id](const std::unique_ptr<RingState>& r) { return r->id == id; });
  if (it == rings_.end()) return;
  RingState& r = **it;
  r.opt.onDead = nullptr;  // the communicator is going away: a failing send tells nobody
  const int64_t now = nowMs();
  for (Link& l : r.links) {
    if (l.sock.valid()) queue(r, l, makeFrame(FrameKind::Bye, r.opt.rank, r.opt.commKey), now);
  }
  rings_.erase(it);  // closes the sockets: the neighbours read the goodbye, then the end
}

RingState* LivenessMonitor::find(uint64_t id) {
  for (auto& r : rings_) {
    if (r->id == id) return r.get();
  }
  return nullptr;
}

void LivenessMonitor::collectFds(std::vector<pollfd>* pfds,
                                 std::vector<std::pair<uint64_t, size_t>>* owners) {
  pfds->assign(1, pollfd{wake_.get(), POLLIN, 0});
  owners->assign(1, {0, 0});
  std::lock_guard<std::mutex> lock(mu_);
  if (exiting_) return;
  for (auto& r : rings_) {
    for (size_t i = 0; i < r->links.size(); ++i) {
      const Link& l = r->links[i];
      if (!l.sock.valid()) continue;
      short events = POLLIN | (l.out.empty() ? 0 : POLLOUT);
      pfds->push_back(pollfd{l.sock.fd(), events, 0});
      owners->push_back({r->id, i});
    }
  }
}

void LivenessMonitor::loop() {
  std::vector<pollfd> pfds;
  std::vector<std::pair<uint64_t, size_t>> owners;
  for (;;) {
    collectFds(&pfds, &owners);
    // Idle (no ring) the thread sleeps until add() wakes it.
    (void)poll(pfds.data(), pfds.size(), pfds.size() > 1 ? kPollMs : -1);
    uint64_t drained = 0;
    ssize_t n = read(wake_.get(), &drained, sizeof(drained));
    (void)n;
    std::lock_guard<std::mutex> lock(mu_);
    if (exiting_) continue;
    const int64_t now = nowMs();
    // A long gap in this loop means this process was stopped (SIGSTOP, a
    // job-wide suspend) or starved: its peers' silence during the gap says
    // nothing about them. Give every link a fresh window.
    if (lastLoopMs_ > 0 && now - lastLoopMs_ > kStallMs) {
      FERRY_INFO(kLogRas,
                 "liveness: this process was not scheduled for %lld ms; restarting the "
                 "silence windows",
                 static_cast<long long>(now - lastLoopMs_));
      for (auto& r : rings_) {
        for (Link& l : r->links) l.lastHeardMs = now;
      }
    }
    lastLoopMs_ = now;
    for (size_t k = 1; k < pfds.size(); ++k) {
      if (pfds[k].revents == 0) continue;
      RingState* r = find(owners[k].first);
      if (r == nullptr) continue;  // removed while we polled
      Link& l = r->links[owners[k].second];
      if (l.sock.fd() != pfds[k].fd) continue;  // closed while we polled
      if ((pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0) readLink(*r, l, now);
      if (l.sock.valid() && (pfds[k].revents & POLLOUT) != 0) flush(*r, l);
    }
    for (auto& r : rings_) tick(*r, now);
  }
}

void LivenessMonitor::readLink(RingState& r, Link& l, int64_t now) {
  char buf[512];
  for (;;) {
    ssize_t n = ::recv(l.sock.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      l.lastHeardMs = now;
      l.in.append(buf, static_cast<size_t>(n));
      while (l.in.size() >= sizeof(Frame) && l.sock.valid()) {
        Frame f;
        memcpy(&f, l.in.data(), sizeof(f));
        l.in.erase(0, sizeof(f));
        handleFrame(r, l, f);
      }
      if (!l.sock.valid()) return;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    linkClosed(r, l, Cause::Closed);  // end of stream, or reset
    return;
  }
}

void LivenessMonitor::handleFrame(RingState& r, Link& l, const Frame& f) {
  if (f.magic != kFrameMagic || f.check != checkOf(r.opt.commKey)) {
    linkClosed(r, l, Cause::Malformed);
    return;
  }
  switch (static_cast<FrameKind>(f.kind)) {
    case FrameKind::Heartbeat:
    case FrameKind::Hello:
      return;
    case FrameKind::Bye:
      FERRY_INFO(kLogRas, "liveness: rank %d left the communicator (goodbye)", l.peer);
      l.bye = true;
      l.sock.close();
      return;
    case FrameKind::Dead: {
      const int q = f.subject;
      if (q < 0 || q >= r.opt.nranks || q == r.opt.rank || r.dead[q]) return;
      declare(r, q, "rank " + std::to_string(l.peer) + " reported it gone: " + causeText(f.cause),
              f.cause, &l);
      return;
    }
  }
  linkClosed(r, l, Cause::Malformed);
}

void LivenessMonitor::linkClosed(RingState& r, Link& l, Cause cause) {
  l.sock.close();
  if (l.bye || r.dead[l.peer]) return;
  declare(r, l.peer, causeText(static_cast<uint16_t>(cause)), static_cast<uint16_t>(cause),
          nullptr);
}

// Records the death, tells the communicator, and passes the news on to
// every other neighbour (never back to the link it came from).
void LivenessMonitor::declare(RingState& r, int peer, const std::string& why, uint16_t cause,
                              const Link* from) {
  r.dead[peer] = true;
  FERRY_INFO(kLogRas, "liveness: rank %d is dead: %s", peer, why.c_str());
  if (r.opt.onDead) r.opt.onDead(peer, why);
  const int64_t now = nowMs();
  Frame f = makeFrame(FrameKind::Dead, peer, r.opt.commKey, static_cast<Cause>(cause));
  for (Link& other : r.links) {
    if (&other == from || other.peer == peer || !other.sock.valid()) continue;
    queue(r, other, f, now);
  }
}

void LivenessMonitor::queue(RingState& r, Link& l, const Frame& f, int64_t now) {
  l.out.append(reinterpret_cast<const char*>(&f), sizeof(f));
  l.lastSentMs = now;
  flush(r, l);
}

void LivenessMonitor::flush(RingState& r, Link& l) {
  while (!l.out.empty()) {
    ssize_t n = ::send(l.sock.fd(), l.out.data(), l.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      l.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    linkClosed(r, l, Cause::Closed);
    return;
  }
}

void LivenessMonitor::tick(RingState& r, int64_t now) {
  for (Link& l : r.links) {
    if (!l.sock.valid()) continue;
    if (r.opt.silenceMs > 0 && now - l.lastHeardMs > r.opt.silenceMs) {
      l.sock.close();
      if (!r.dead[l.peer]) {
        std::string why = std::string(causeText(static_cast<uint16_t>(Cause::Silent))) +
                          ": nothing for " + std::to_string((now - l.lastHeardMs) / 1000) + " s";
        declare(r, l.peer, why, static_cast<uint16_t>(Cause::Silent), nullptr);
      }
      continue;
    }
    if (now - l.lastSentMs >= r.opt.heartbeatMs && l.out.size() < kMaxQueuedBytes) {
      queue(r, l, makeFrame(FrameKind::Heartbeat, r.opt.rank, r.opt.commKey), now);
    }
  }
}

void LivenessMonitor::goodbyeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (getpid() != pid_ || exiting_) return;
  exiting_ = true;
  const int64_t now = nowMs();
  for (auto& r : rings_) {
    r->opt.onDead = nullptr;  // the process is exiting: no more callbacks
    for (Link& l : r->links) {
      if (l.sock.valid()) queue(*r, l, makeFrame(FrameKind::Bye, r->opt.rank, r->opt.commKey), now);
    }
  }
}

// A fork() child has no monitor thread. It drops its copies of the
// parent's sockets (so that the parent's death still ends those
// connections, and the child's exit says nothing on them) and forgets the
// parent's rings (their communicators' destructors find nothing to remove).
// Communicators the child creates itself get a thread and wake fd of its own.
void LivenessMonitor::forgetInChild() {
  for (auto& r : rings_) {
    for (Link& l : r->links) l.sock.close();
    r->opt.onDead = nullptr;
  }
  rings_.clear();
  exiting_ = false;
  started_ = false;
  lastLoopMs_ = 0;
  pid_ = getpid();
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // the parent's stays the parent's
  mu_.unlock();
}

namespace {

// Accepts connections until the previous rank's valid hello arrives;
// anything else is dropped with a WARN.
Status acceptPrevious(const boot::Socket& listen, int prev, uint64_t key,
                      const boot::WaitContext& wait, boot::Socket* out) {
  for (;;) {
    boot::Socket s;
    FERRY_CHECK(listen.accept(wait, "the previous rank's liveness connection", &s));
    Frame f;
    boot::WaitContext helloWait = wait;
    helloWait.deadline = wait.deadline.min(boot::Deadline::afterMs(5000));
    if (s.recvAll(&f, sizeof(f), helloWait, "a liveness hello") == ncclSuccess &&
        f.magic == kFrameMagic && f.check == checkOf(key) &&
        f.kind == static_cast<uint16_t>(FrameKind::Hello) && f.subject == prev) {
      *out = std::move(s);
      return ncclSuccess;
    }
    FERRY_WARN("liveness: dropped a connection that is not rank %d's hello", prev);
    FERRY_CHECK(wait.check("the previous rank's liveness connection"));
  }
}

}  // namespace

Status LivenessRing::create(boot::Bootstrap* bootstrap, const boot::SocketAddress& localIp,
                            LivenessOptions options, std::unique_ptr<LivenessRing>* out) {
  std::unique_ptr<LivenessRing> ring(new LivenessRing());
  const int n = options.nranks;
  const int rank = options.rank;
  if (n <= 1) {
    *out = std::move(ring);
    return ncclSuccess;
  }
  boot::SocketAddress addr = localIp;
  addr.setPort(0);
  boot::Socket listen;
  FERRY_CHECK(boot::Socket::listen(addr, /*reuseAddr=*/false, &listen));
  std::vector<boot::SocketAddress> addrs(n);
  addrs[rank] = listen.localAddress();
  FERRY_CHECK(bootstrap->allGather(addrs.data(), sizeof(boot::SocketAddress)));

  auto wait = boot::WaitContext::make(options.setupTimeoutMs, options.abortFlag);
  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  boot::Socket toNext;
  FERRY_CHECK(boot::Socket::connect(addrs[next], wait, "the next rank's liveness socket", &toNext));
  Frame hello = makeFrame(FrameKind::Hello, rank, options.commKey);
  FERRY_CHECK(toNext.sendAll(&hello, sizeof(hello), wait, "the next rank's liveness socket"));
  boot::Socket fromPrev;
  FERRY_CHECK(acceptPrevious(listen, prev, options.commKey, wait, &fromPrev));

  auto state = std::make_unique<RingState>();
  state->links.resize(2);
  state->links[0].peer = next;
  state->links[0].sock = std::move(toNext);
  state->links[1].peer = prev;
  state->links[1].sock = std::move(fromPrev);
  state->dead.assign(n, false);
  state->opt = std::move(options);
  FERRY_INFO(kLogRas,
             "liveness: rank %d watches ranks %d and %d (heartbeat %lld ms, silence %lld ms)", rank,
             next, prev, static_cast<long long>(state->opt.heartbeatMs),
             static_cast<long long>(state->opt.silenceMs));
  ring->monitor_ = &LivenessMonitor::get();
  ring->id_ = ring->monitor_->add(std::move(state));
  *out = std::move(ring);
  return ncclSuccess;
}

LivenessRing::~LivenessRing() {
  if (monitor_ != nullptr) monitor_->remove(id_);
}

}  // namespace ferry
