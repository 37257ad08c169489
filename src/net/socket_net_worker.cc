// The socket engine's helper threads: each moves the chunks queued on its
// own data sockets with non-blocking I/O and poll(), so a slow socket never
// holds up another one and the proxy thread never waits on the network.
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <string>
#include <utility>

#include "core/clock.h"
#include "core/cpu_relax.h"
#include "core/log.h"
#include "net/socket_net_internal.h"

namespace ferry::net::sock {

namespace {

// Longest sleep in poll(): every wake-up reason also writes the eventfd, so
// this only bounds the damage of a lost wake-up.
constexpr int kPollMs = 200;
// Bytes one socket may move per visit before the others of the same thread
// get their turn.
constexpr uint64_t kVisitBytes = 4ull << 20;

std::atomic<uint64_t> gLateWakeups{0};

// The calling thread's CPU time (only a thread can read its own cheaply).
int64_t threadCpuNs() {
  timespec cpu{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) != 0) return 0;
  return static_cast<int64_t>(cpu.tv_sec) * 1000000000 + cpu.tv_nsec;
}

}  // namespace

std::string describeWorkerStats(const WorkerStats& st) {
  char buf[128];
  snprintf(buf, sizeof(buf), "cpu %.1f/%.1f ms, spin %.1f ms%s", st.cpuNs / 1e6, st.busyNs / 1e6,
           st.spinNs / 1e6, st.lateWakeups > 0 ? ", LATE WAKE-UPS" : "");
  return buf;
}

uint64_t lateWakeups() {
  return gLateWakeups.load(std::memory_order_relaxed);
}

Worker::Worker(int index, int64_t spinNs) : index_(index), spinNs_(spinNs) {}

Worker::~Worker() {
  stop();
}

Status Worker::open() {
  wakeFd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wakeFd_) FERRY_FAIL(ncclSystemError, "net/socket: eventfd failed: %s", strerror(errno));
  return ncclSuccess;
}

Status Worker::launch() {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    FERRY_FAIL(ncclSystemError, "net/socket: cannot start helper thread: %s", e.what());
  }
  return ncclSuccess;
}

void Worker::notify() {
  // seq_cst, both: the poster's half of the hand-shake with waitForWork
  // (see hasWork_): store the news, then look whether the thread sleeps.
  hasWork_.store(true, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
}

void Worker::attach(Lane* lane) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    attachQ_.push_back(lane);
  }
  notify();
}

void Worker::detach(Lane* lane) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!launched()) {
    // No thread ever saw it: take it back from the queue.
    attachQ_.erase(std::remove(attachQ_.begin(), attachQ_.end(), lane), attachQ_.end());
    return;
  }
  detachQ_.push_back(lane);
  lock.unlock();
  notify();
  lock.lock();
  // The thread acknowledges under mu_ (gone_), which orders its last
  // accesses to the lane before our return.
  detached_.wait(lock, [&] {
    auto it = std::find(gone_.begin(), gone_.end(), lane);
    if (it == gone_.end()) return false;
    gone_.erase(it);
    return true;
  });
}

void Worker::post(std::vector<Task>* tasks) {
  {
    // The mutex publishes the tasks and the request fields written before
    // (data pointer, sizes) to the worker, which reads them under it.
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.insert(incoming_.end(), tasks->begin(), tasks->end());
  }
  tasks->clear();
  notify();
}

void Worker::wake() {
  if (!wakeFd_) return;
  uint64_t one = 1;
  ssize_t n = write(wakeFd_.get(), &one, sizeof(one));
  (void)n;  // EAGAIN: the counter is saturated, which already means "wake up"
}

void Worker::stop() {
  if (!thread_.joinable()) return;
  // Release (paired with the thread's acquire): a flag only; joining is
  // what orders the thread's last writes before the caller's reads.
  stop_.store(true, std::memory_order_release);
  wake();
  thread_.join();
}

// Takes new lanes, tasks and departures, all under mu_ and in that order: a
// lane's tasks come after its attach, and its departure is acknowledged only
// once nothing of it is left to place. True when anything came.
bool Worker::takeIncoming() {
  // seq_cst (a plain release would do): cleared before the take, so a post
  // whose tasks miss this take leaves the flag set for the next round.
  hasWork_.store(false, std::memory_order_seq_cst);
  std::unique_lock<std::mutex> lock(mu_);
  const bool departures = !detachQ_.empty();
  const bool any = !attachQ_.empty() || !incoming_.empty() || departures;
  lanes_.insert(lanes_.end(), attachQ_.begin(), attachQ_.end());
  attachQ_.clear();
  for (Task& t : incoming_) t.lane->queues[static_cast<size_t>(t.sock)].push_back(t);
  incoming_.clear();
  for (Lane* lane : detachQ_) {
    lanes_.erase(std::remove(lanes_.begin(), lanes_.end(), lane), lanes_.end());
    gone_.push_back(lane);
  }
  detachQ_.clear();
  if (departures) {
    // Published with the acknowledgement: the departing comm's closer may
    // read them (publishedStats) while the thread runs on.
    stats_.cpuNs = threadCpuNs();
    published_ = stats_;
  }
  lock.unlock();
  if (departures) detached_.notify_all();
  return any;
}

// Settles every chunk queued on the lane as failed: the requests then
// complete (with the comm's error) and nothing here touches their buffers
// again.
void Worker::dropLane(Lane& lane) {
  for (auto& q : lane.queues) {
    for (Task& t : q) {
      Request* r = t.req;
      // Relaxed: published by the release increment of `settled` below.
      r->failedChunks.fetch_add(1, std::memory_order_relaxed);
      // Release: the last access to the request; the proxy's acquire load of
      // `settled` may free the slot right after.
      r->settled.fetch_add(1, std::memory_order_release);
    }
    q.clear();
  }
}

void Worker::dropFailedLanes() {
  for (Lane* lane : lanes_) {
    if (lane->comm->failure() != ncclSuccess) dropLane(*lane);
  }
}

// Moves bytes on the lane's socket `s` until it would block, its queue
// empties or the visit's budget is spent. True when any byte moved.
bool Worker::progressSocket(Lane& lane, int s, int64_t nowNs) {
  auto& q = lane.queues[static_cast<size_t>(s)];
  int64_t& blockedSince = lane.blockedSinceNs[static_cast<size_t>(s)];
  const int fd = lane.fds[static_cast<size_t>(s)];
  const int sockNo = lane.index * static_cast<int>(lane.fds.size()) + s;
  uint64_t budget = kVisitBytes;
  bool moved = false;
  while (!q.empty() && budget > 0) {
    Task& t = q.front();
    while (t.done < t.len && budget > 0) {
      size_t want = static_cast<size_t>(std::min(t.len - t.done, budget));
      size_t n = 0;
      int err = 0;
      IoResult r = lane.send ? sendSome(fd, t.ptr + t.done, want, &n, &err)
                             : recvSome(fd, t.ptr + t.done, want, &n, &err);
      if (r == IoResult::kWouldBlock) {
        if (!moved && blockedSince == 0) blockedSince = nowNs;
        return moved;
      }
      if (r != IoResult::kProgress) {
        lane.comm->fail(ncclSystemError,
                        "net/socket: %s data socket %d (lane %d) to %s failed after %llu of %llu "
                        "bytes of a chunk: %s",
                        lane.send ? "send" : "receive", sockNo, lane.index,
                        lane.comm->peer().c_str(), static_cast<unsigned long long>(t.done),
                        static_cast<unsigned long long>(t.len),
                        err == 0 ? "peer closed the connection" : strerror(err));
        return moved;
      }
      t.done += n;
      budget -= std::min<uint64_t>(n, budget);
      lane.stats.bytes += n;
      if (blockedSince != 0) {
        const int64_t waited = nowNs - blockedSince;
        if (waited > lane.stats.maxSocketWaitNs) {
          lane.stats.maxSocketWaitNs = waited;
          lane.stats.maxWaitSocket = sockNo;
        }
        blockedSince = 0;
      }
      moved = true;
    }
    if (t.done < t.len) break;
    Request* r = t.req;
    FERRY_TRACE(kLogNet, "t=%lld us: net/socket: helper %d %s %llu bytes of %s %llu", traceNowUs(),
                index_, lane.send ? "wrote" : "read", static_cast<unsigned long long>(t.len),
                lane.send ? "send" : "receive", static_cast<unsigned long long>(r->seq));
    q.pop_front();
    // Release: every byte of this chunk was written to (receive) or read
    // from (send) the caller's buffer before; the proxy's acquire load of
    // `settled` orders them before it reports the request done.
    r->settled.fetch_add(1, std::memory_order_release);
  }
  return moved;
}

bool Worker::progressLane(Lane& lane, int64_t now) {
  bool moved = false;
  for (size_t s = 0; s < lane.queues.size(); ++s) {
    if (lane.queues[s].empty()) {
      lane.blockedSinceNs[s] = 0;  // nothing queued: not held up
      continue;
    }
    moved |= progressSocket(lane, static_cast<int>(s), now);
    if (lane.comm->failure() != ncclSuccess) break;
  }
  return moved;
}

bool Worker::progressAll(int64_t now) {
  bool moved = false;
  for (Lane* lane : lanes_) moved |= progressLane(*lane, now);
  return moved;
}

// pfds_: the eventfd, then every socket with queued work; returns how many.
nfds_t Worker::buildPollSet() {
  pfds_.clear();
  pfds_.push_back(pollfd{wakeFd_.get(), POLLIN, 0});
  for (const Lane* lane : lanes_) {
    for (size_t s = 0; s < lane->queues.size(); ++s) {
      if (lane->queues[s].empty()) continue;
      pfds_.push_back(pollfd{lane->fds[s], static_cast<short>(lane->send ? POLLOUT : POLLIN), 0});
    }
  }
  return static_cast<nfds_t>(pfds_.size());
}

// One round of spinning: returns as soon as a socket with queued work is
// ready (poll without sleeping) or work is posted, else after a short burst.
void Worker::spinBriefly() {
  const int64_t start = steadyNowNs();
  const nfds_t n = buildPollSet();
  const bool ready = n > 1 && ::poll(pfds_.data() + 1, n - 1, 0) > 0;
  for (int i = 0; !ready && i < 64; ++i) {
    // Acquire is enough here: the tasks themselves are published by mu_.
    if (hasWork_.load(std::memory_order_acquire)) break;
    cpuRelax();
  }
  stats_.spinNs += steadyNowNs() - start;
}

// Spins while the last activity is younger than spinNs_, else sleeps.
void Worker::waitForWork(int64_t lastActiveNs) {
  if (spinNs_ > 0 && steadyNowNs() - lastActiveNs < spinNs_) return spinBriefly();
  // seq_cst, both: the thread's half of the hand-shake with post() (see
  // hasWork_): announce the sleep, then look for news posted meanwhile.
  sleeping_.store(true, std::memory_order_seq_cst);
  if (!hasWork_.load(std::memory_order_seq_cst)) sleepForWork();
  // Relaxed: only post()'s choice to skip the eventfd depends on it, and a
  // stale true there costs one spare wake-up.
  sleeping_.store(false, std::memory_order_relaxed);
}

// Sleeps until a socket with queued work is ready or the eventfd fires.
void Worker::sleepForWork() {
  int rc = ::poll(pfds_.data(), buildPollSet(), kPollMs);
  if (rc < 0 && errno != EINTR) {
    for (Lane* lane : lanes_) {
      lane->comm->fail(ncclSystemError, "net/socket: helper thread poll failed: %s",
                       strerror(errno));
    }
  }
  if (rc > 0 && (pfds_[0].revents & POLLIN)) {
    uint64_t count = 0;
    ssize_t got = read(wakeFd_.get(), &count, sizeof(count));
    (void)got;  // EAGAIN: another wake-up was already consumed; nothing lost
  }
  // Work that came while the thread slept through the whole timeout was
  // posted without a wake-up: the hand-shake failed (or, rarely, the post
  // landed between its flag and its eventfd write as the timeout expired).
  // Acquire: a flag only; the tasks are published by mu_.
  if (rc == 0 && hasWork_.load(std::memory_order_acquire)) {
    ++stats_.lateWakeups;
    // Relaxed: a statistic (socketNetLateWakeups), read with no other data.
    gLateWakeups.fetch_add(1, std::memory_order_relaxed);
  }
}

void Worker::run() {
  int64_t lastActive = steadyNowNs();
  // Acquire: pairs with the release store in stop() (a flag only).
  while (!stop_.load(std::memory_order_acquire)) {
    // Acquire: a flag only (mu_ publishes what it announces); skipping the
    // mutex while nothing came keeps a spinning thread off the posters' lock.
    if (hasWork_.load(std::memory_order_acquire) && takeIncoming()) lastActive = steadyNowNs();
    dropFailedLanes();
    // Try the I/O first and poll only when nothing moved: a streaming socket
    // then costs one syscall per buffer-full instead of two.
    const int64_t start = steadyNowNs();
    const bool moved = progressAll(start);
    const int64_t end = steadyNowNs();
    stats_.busyNs += end - start;
    if (moved) {
      lastActive = end;
    } else {
      waitForWork(lastActive);
    }
  }
  stats_.cpuNs = threadCpuNs();
}

WorkerStats Worker::publishedStats() {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

WorkerPool::WorkerPool(int nThreads, int64_t spinNs) {
  for (int i = 0; i < nThreads; ++i) workers_.push_back(std::make_unique<Worker>(i, spinNs));
}

Status WorkerPool::assign(Worker** out) {
  Worker* w = workers_[next_].get();
  next_ = (next_ + 1) % workers_.size();
  if (!w->launched()) {
    FERRY_CHECK(w->open());
    FERRY_CHECK(w->launch());
  }
  ++lanes_;
  *out = w;
  return ncclSuccess;
}

// The engine lives as long as the process (net_registry.cc), so the pool's
// threads are never joined in a real program: their statistics are logged
// whenever the last lane leaves, as published with its departure.
void WorkerPool::released(int lanes) {
  lanes_ -= lanes;
  if (lanes_ > 0 || !logEnabled(LogLevel::Info, kLogNet)) return;
  std::string line;
  for (auto& w : workers_) {
    if (!w->launched()) continue;
    line +=
        " [" + std::to_string(w->index()) + ": " + describeWorkerStats(w->publishedStats()) + "]";
  }
  FERRY_INFO(kLogNet, "net/socket: shared helpers idle (every comm closed);%s", line.c_str());
}

}  // namespace ferry::net::sock
