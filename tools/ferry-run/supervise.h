// The launcher's event loop: relays output, reaps ranks, enforces the
// timeout, forwards signals, stops every rank when one fails.
//
// One thread runs it. Signals (SIGCHLD, SIGINT, SIGTERM, SIGHUP) must be
// blocked by the caller and arrive through `signalFd` (a signalfd), so no
// handler runs asynchronously. Every wait is bounded: poll wakes at least
// every kTickMs, ranks that ignore SIGTERM get SIGKILL after kGraceSec, and
// pipes kept open by escaped grandchildren are abandoned kDrainSec after the
// last rank was reaped.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "relay.h"
#include "spawn.h"

namespace ferry::run {

class Supervisor {
 public:
  static constexpr int kTickMs = 100;
  static constexpr double kGraceSec = 3.0;
  static constexpr double kDrainSec = 2.0;
  static constexpr int kTimeoutExit = 124;

  // timeoutSec 0: none. Takes ownership of the ranks' pipes.
  Supervisor(std::vector<RankProcess> ranks, double timeoutSec, int signalFd);

  // Runs until every rank is reaped and its output relayed; returns the
  // launcher's exit code.
  int run();

 private:
  using Clock = std::chrono::steady_clock;

  struct Rank {
    RankProcess proc;
    bool reaped = false;
    std::unique_ptr<LineRelay> outRelay;
    std::unique_ptr<LineRelay> errRelay;
  };

  bool finished() const;
  int pollTimeoutMs() const;
  void pollOnce();
  void handleSignals();
  // Reads what is available on one pipe; closes it at EOF or error.
  void drainPipe(UniqueFd* fd, LineRelay* relay);
  void reapRanks();
  void onRankExit(Rank* rank, int status);
  void checkDeadlines();
  // Starts stopping every rank: `sig` now, SIGKILL after kGraceSec.
  void stopAll(int sig);
  void signalAll(int sig);
  int exitCode() const;

  std::vector<Rank> ranks_;
  int signalFd_;
  bool hasTimeout_;
  double timeoutSec_;
  Clock::time_point timeoutAt_;
  bool stopping_ = false;
  bool killed_ = false;  // SIGKILL sent
  Clock::time_point killAt_;
  bool allReaped_ = false;
  Clock::time_point drainUntil_;
  bool timedOut_ = false;
  int firstFailure_ = 0;     // exit code of the first rank that failed; 0: none
  int forwardedSignal_ = 0;  // last signal forwarded to the ranks; 0: none
  int signalsReceived_ = 0;
};

}  // namespace ferry::run
