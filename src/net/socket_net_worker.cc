// The socket engine's helper threads: each moves the chunks queued on its
// own data sockets with non-blocking I/O and poll(), so a slow socket never
// holds up another one and the proxy thread never waits on the network.
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
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

}  // namespace

uint64_t lateWakeups() {
  return gLateWakeups.load(std::memory_order_relaxed);
}

Worker::Worker(Comm* comm, int index, std::vector<int> fds, bool send, int64_t spinNs)
    : comm_(comm),
      index_(index),
      fds_(std::move(fds)),
      send_(send),
      spinNs_(spinNs),
      queues_(fds_.size()),
      blockedSinceNs_(fds_.size(), 0) {}

Worker::~Worker() {
  join();
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

void Worker::post(std::vector<Task>* tasks) {
  {
    // The mutex publishes the tasks and the request fields written before
    // (data pointer, sizes) to the worker, which reads them under it.
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.insert(incoming_.end(), tasks->begin(), tasks->end());
  }
  tasks->clear();
  // seq_cst, both: post()'s half of the hand-shake with waitForWork (see
  // hasWork_): store the news, then look whether the thread sleeps.
  hasWork_.store(true, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
}

void Worker::wake() {
  if (!wakeFd_) return;
  uint64_t one = 1;
  ssize_t n = write(wakeFd_.get(), &one, sizeof(one));
  (void)n;  // EAGAIN: the counter is saturated, which already means "wake up"
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::takeIncoming() {
  // seq_cst (a plain release would do): cleared before the swap, so a post
  // whose tasks miss this swap leaves the flag set for the next round.
  hasWork_.store(false, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(mu_);
    scratch_.swap(incoming_);
  }
  for (Task& t : scratch_) queues_[t.sock].push_back(t);
  scratch_.clear();
}

// Settles every queued chunk as failed: the requests then complete (with the
// comm's error) and nothing here touches their buffers again.
void Worker::dropAll() {
  for (auto& q : queues_) {
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

// Moves bytes on socket `s` until it would block, its queue empties or the
// visit's budget is spent. True when any byte moved.
bool Worker::progressSocket(int s, int64_t nowNs) {
  auto& q = queues_[s];
  uint64_t budget = kVisitBytes;
  bool moved = false;
  while (!q.empty() && budget > 0) {
    Task& t = q.front();
    while (t.done < t.len && budget > 0) {
      size_t want = static_cast<size_t>(std::min(t.len - t.done, budget));
      size_t n = 0;
      int err = 0;
      IoResult r = send_ ? sendSome(fds_[s], t.ptr + t.done, want, &n, &err)
                         : recvSome(fds_[s], t.ptr + t.done, want, &n, &err);
      if (r == IoResult::kWouldBlock) {
        if (!moved && blockedSinceNs_[s] == 0) blockedSinceNs_[s] = nowNs;
        return moved;
      }
      if (r != IoResult::kProgress) {
        comm_->fail(ncclSystemError,
                    "net/socket: %s data socket %d (thread %d) to %s failed after %llu of %llu "
                    "bytes of a chunk: %s",
                    send_ ? "send" : "receive", index_ * static_cast<int>(fds_.size()) + s, index_,
                    comm_->peer().c_str(), static_cast<unsigned long long>(t.done),
                    static_cast<unsigned long long>(t.len),
                    err == 0 ? "peer closed the connection" : strerror(err));
        return moved;
      }
      t.done += n;
      budget -= std::min<uint64_t>(n, budget);
      stats_.bytes += n;
      if (blockedSinceNs_[s] != 0) {
        const int64_t waited = nowNs - blockedSinceNs_[s];
        if (waited > stats_.maxSocketWaitNs) {
          stats_.maxSocketWaitNs = waited;
          stats_.maxWaitSocket = index_ * static_cast<int>(fds_.size()) + s;
        }
        blockedSinceNs_[s] = 0;
      }
      moved = true;
    }
    if (t.done < t.len) break;
    Request* r = t.req;
    FERRY_TRACE(kLogNet, "t=%lld us: net/socket: helper %d %s %llu bytes of %s %llu", traceNowUs(),
                index_, send_ ? "wrote" : "read", static_cast<unsigned long long>(t.len),
                send_ ? "send" : "receive", static_cast<unsigned long long>(r->seq));
    q.pop_front();
    // Release: every byte of this chunk was written to (receive) or read
    // from (send) the caller's buffer before; the proxy's acquire load of
    // `settled` orders them before it reports the request done.
    r->settled.fetch_add(1, std::memory_order_release);
  }
  return moved;
}

bool Worker::progressAll(int64_t now) {
  bool moved = false;
  for (size_t s = 0; s < queues_.size(); ++s) {
    if (queues_[s].empty()) {
      blockedSinceNs_[s] = 0;  // nothing queued: not held up
      continue;
    }
    moved |= progressSocket(static_cast<int>(s), now);
    if (comm_->failure() != ncclSuccess) break;
  }
  return moved;
}

// With nothing queued, polls hasWork_ for up to spinNs_: true when work came
// (no wake-up needed), false when the time ran out or the comm stops or
// fails (their wake() then ends the sleep that follows at once).
bool Worker::spinForWork() {
  if (spinNs_ <= 0) return false;
  for (auto& q : queues_) {
    if (!q.empty()) return false;  // waiting on a socket: poll() watches it
  }
  const int64_t start = steadyNowNs();
  bool found = false;
  for (uint32_t i = 1;; ++i) {
    // Acquire is enough here: the tasks themselves are published by mu_.
    if (hasWork_.load(std::memory_order_acquire)) {
      found = true;
      break;
    }
    if (comm_->stopping() || comm_->failure() != ncclSuccess) break;
    cpuRelax();
    if (i % 64 == 0 && steadyNowNs() - start >= spinNs_) break;
  }
  stats_.spinNs += steadyNowNs() - start;
  return found;
}

void Worker::waitForWork() {
  if (spinForWork()) return;
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
  pollfd pfds[1 + kMaxSocksPerThread];
  nfds_t n = 0;
  pfds[n++] = pollfd{wakeFd_.get(), POLLIN, 0};
  for (size_t s = 0; s < queues_.size(); ++s) {
    if (queues_[s].empty()) continue;
    pfds[n++] = pollfd{fds_[s], static_cast<short>(send_ ? POLLOUT : POLLIN), 0};
  }
  int rc = ::poll(pfds, n, kPollMs);
  if (rc < 0 && errno != EINTR) {
    comm_->fail(ncclSystemError, "net/socket: helper thread poll failed: %s", strerror(errno));
  }
  if (rc > 0 && (pfds[0].revents & POLLIN)) {
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
  // Acquire: pairs with the release store in Comm's destructor (a flag only;
  // no data rides on it).
  while (!comm_->stopping()) {
    takeIncoming();
    if (comm_->failure() != ncclSuccess) {
      dropAll();
      waitForWork();
      continue;
    }
    // Try the I/O first and poll only when nothing moved: a streaming socket
    // then costs one syscall per buffer-full instead of two.
    const int64_t start = steadyNowNs();
    const bool moved = progressAll(start);
    stats_.busyNs += steadyNowNs() - start;
    if (!moved) waitForWork();
  }
  timespec cpu{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) {
    stats_.cpuNs = static_cast<int64_t>(cpu.tv_sec) * 1000000000 + cpu.tv_nsec;
  }
}

}  // namespace ferry::net::sock
