#include "supervise.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ferry::run {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

Supervisor::Supervisor(std::vector<RankProcess> ranks, double timeoutSec, int signalFd)
    : signalFd_(signalFd), hasTimeout_(timeoutSec > 0), timeoutSec_(timeoutSec) {
  timeoutAt_ = Clock::now() + seconds(hasTimeout_ ? timeoutSec : 0);
  for (RankProcess& proc : ranks) {
    Rank rank;
    rank.outRelay = std::make_unique<LineRelay>(STDOUT_FILENO, proc.rank);
    rank.errRelay = std::make_unique<LineRelay>(STDERR_FILENO, proc.rank);
    rank.proc = std::move(proc);
    ranks_.push_back(std::move(rank));
  }
}

bool Supervisor::finished() const {
  if (!allReaped_) return false;
  return std::none_of(ranks_.begin(), ranks_.end(),
                      [](const Rank& r) { return r.proc.out.valid() || r.proc.err.valid(); });
}

int Supervisor::pollTimeoutMs() const {
  Clock::time_point next = Clock::now() + std::chrono::milliseconds(kTickMs);
  if (hasTimeout_ && !timedOut_) next = std::min(next, timeoutAt_);
  if (stopping_ && !killed_) next = std::min(next, killAt_);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, kTickMs));
}

void Supervisor::pollOnce() {
  std::vector<pollfd> fds;
  std::vector<std::pair<UniqueFd*, LineRelay*>> pipes;
  fds.push_back({signalFd_, POLLIN, 0});
  for (Rank& r : ranks_) {
    if (r.proc.out.valid()) {
      fds.push_back({r.proc.out.get(), POLLIN, 0});
      pipes.emplace_back(&r.proc.out, r.outRelay.get());
    }
    if (r.proc.err.valid()) {
      fds.push_back({r.proc.err.get(), POLLIN, 0});
      pipes.emplace_back(&r.proc.err, r.errRelay.get());
    }
  }
  int n = poll(fds.data(), fds.size(), pollTimeoutMs());
  if (n <= 0) return;  // timeout or EINTR: deadlines and reaping run anyway
  if (fds[0].revents != 0) handleSignals();
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) drainPipe(pipes[i - 1].first, pipes[i - 1].second);
  }
}

void Supervisor::handleSignals() {
  signalfd_siginfo info;
  while (read(signalFd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reapRanks() runs every iteration
    ++signalsReceived_;
    forwardedSignal_ = sig;
    if (signalsReceived_ == 1) {
      fprintf(stderr, "ferry-run: received %s, forwarding to the ranks\n", strsignal(sig));
      stopAll(sig);
    } else {
      fprintf(stderr, "ferry-run: received %s again, killing the ranks\n", strsignal(sig));
      signalAll(SIGKILL);
      killed_ = true;
    }
  }
}

void Supervisor::drainPipe(UniqueFd* fd, LineRelay* relay) {
  char buf[kReadChunk];
  // Bounded: at most a few chunks per call so one chatty rank cannot starve
  // the deadlines; poll reports the rest next time.
  for (int i = 0; i < 16 && fd->valid(); ++i) {
    ssize_t n = read(fd->get(), buf, sizeof(buf));
    if (n > 0) {
      relay->feed(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    relay->finish();  // EOF or error: the stream is over
    fd->reset();
  }
}

void Supervisor::reapRanks() {
  for (Rank& r : ranks_) {
    if (r.reaped) continue;
    int status = 0;
    pid_t got = waitpid(r.proc.pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    r.reaped = true;
    if (got < 0) status = 0;  // ECHILD: not ours any more; nothing to report
    // Relay what the rank wrote before it died, so its last lines come
    // before the launcher's verdict on it.
    drainPipe(&r.proc.out, r.outRelay.get());
    drainPipe(&r.proc.err, r.errRelay.get());
    onRankExit(&r, status);
  }
  if (!allReaped_ &&
      std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.reaped; })) {
    allReaped_ = true;
    drainUntil_ = Clock::now() + seconds(kDrainSec);
  }
}

void Supervisor::onRankExit(Rank* rank, int status) {
  bool exited = WIFEXITED(status);
  if (exited && WEXITSTATUS(status) == 0) return;
  if (stopping_) return;  // collateral of a stop we started: not news
  int code = 0;
  if (exited) {
    code = WEXITSTATUS(status);
    fprintf(stderr, "ferry-run: rank %d exited with code %d\n", rank->proc.rank, code);
  } else {
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    code = 128 + sig;
    fprintf(stderr, "ferry-run: rank %d killed by signal %d (%s)\n", rank->proc.rank, sig,
            strsignal(sig));
  }
  firstFailure_ = code;
  bool others = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return !r.reaped; });
  if (others) fprintf(stderr, "ferry-run: stopping the other ranks\n");
  stopAll(SIGTERM);
}

void Supervisor::checkDeadlines() {
  Clock::time_point now = Clock::now();
  if (hasTimeout_ && !timedOut_ && !allReaped_ && now >= timeoutAt_) {
    timedOut_ = true;
    fprintf(stderr, "ferry-run: timeout of %g s exceeded, killing the ranks\n", timeoutSec_);
    stopAll(SIGTERM);
  }
  if (stopping_ && !killed_ && now >= killAt_) {
    killed_ = true;
    signalAll(SIGKILL);
  }
  if (allReaped_ && now >= drainUntil_) {
    // A grandchild that left its rank's group still holds the pipe: stop waiting.
    for (Rank& r : ranks_) {
      if (r.proc.out.valid()) drainPipe(&r.proc.out, r.outRelay.get());
      if (r.proc.err.valid()) drainPipe(&r.proc.err, r.errRelay.get());
      r.outRelay->finish();
      r.errRelay->finish();
      r.proc.out.reset();
      r.proc.err.reset();
    }
  }
}

void Supervisor::stopAll(int sig) {
  signalAll(sig);
  if (!stopping_) {
    stopping_ = true;
    killAt_ = Clock::now() + seconds(kGraceSec);
  }
}

void Supervisor::signalAll(int sig) {
  // Each rank leads its own process group; signalling the group reaches the
  // processes it started too. A reaped rank's group may still hold such
  // descendants (keeping its pipes open), so it is signalled as well.
  for (Rank& r : ranks_) {
    if (kill(-r.proc.pid, sig) != 0 && !r.reaped) kill(r.proc.pid, sig);
  }
}

int Supervisor::exitCode() const {
  if (timedOut_) return kTimeoutExit;
  if (firstFailure_ != 0) return firstFailure_;
  if (forwardedSignal_ != 0) return 128 + forwardedSignal_;
  return 0;
}

int Supervisor::run() {
  while (!finished()) {
    pollOnce();
    reapRanks();
    checkDeadlines();
  }
  return exitCode();
}

}  // namespace ferry::run
