// ferry-run: starts N local ranks of a program with the rendezvous and device
// assignment in their environment, relays their output with rank prefixes and
// stops them all when one fails. `ferry-run --help` documents the interface.
//
// The launcher does not use CUDA: it counts GPUs from CUDA_VISIBLE_DEVICES or
// /proc/driver/nvidia/gpus, so it runs (and tests run) on machines without one.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "core/env.h"
#include "core/params.h"
#include "fd.h"
#include "plan.h"
#include "spawn.h"
#include "supervise.h"

extern char** environ;

namespace ferry::run {
namespace {

constexpr int kUsageExit = 2;
constexpr int kLaunchFailureExit = 1;

int fail(const std::string& message) {
  fprintf(stderr, "ferry-run: %s\n", message.c_str());
  return kLaunchFailureExit;
}

std::vector<std::string> currentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

// Stops ranks already started when a later one cannot be: they would block in
// bootstrap waiting for it.
void abandonRanks(std::vector<RankProcess>* ranks) {
  for (RankProcess& r : *ranks) kill(-r.pid, SIGKILL);
  for (RankProcess& r : *ranks) {
    int status = 0;
    while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

int launch(const Options& opts, const Params& params) {
  HostFacts facts;
  facts.gpus = visibleGpus(envIsSet("CUDA_VISIBLE_DEVICES"), envString("CUDA_VISIBLE_DEVICES"),
                           countProcGpus());
  facts.hostDevices = static_cast<int>(params.getInt(ParamId::HostDevices));
  std::string error = checkPlan(opts, facts);
  if (!error.empty()) return fail(error);
  if (!pickFreePorts(&facts.commPort, &facts.masterPort, &error)) return fail(error);

  // Signals arrive through a signalfd read by the supervisor's poll loop;
  // the children get the original mask back before exec.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
  if (sigprocmask(SIG_BLOCK, &handled, &original) != 0) return fail("sigprocmask failed");
  UniqueFd signalFd(signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signalFd.valid()) return fail("signalfd failed");
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher

  std::vector<std::string> baseEnv = currentEnvironment();
  std::vector<RankProcess> ranks(static_cast<size_t>(opts.nranks));
  for (int r = 0; r < opts.nranks; ++r) {
    std::vector<std::string> env = mergeEnvironment(baseEnv, rankEnvironment(opts, facts, r));
    if (!spawnRank(r, opts.command, env, original, &ranks[static_cast<size_t>(r)], &error)) {
      ranks.resize(static_cast<size_t>(r));
      abandonRanks(&ranks);
      return fail("cannot start rank " + std::to_string(r) + ": " + error);
    }
  }
  Supervisor supervisor(std::move(ranks), opts.timeoutSec, signalFd.get());
  return supervisor.run();
}

}  // namespace
}  // namespace ferry::run

int main(int argc, char** argv) {
  using namespace ferry::run;
  std::vector<std::string> args(argv + 1, argv + argc);
  ferry::Params params = ferry::Params::load();
  double envTimeout = params.isSet(ferry::ParamId::RunTimeout)
                          ? static_cast<double>(params.getInt(ferry::ParamId::RunTimeout))
                          : 0.0;
  ParsedArgs parsed = parseArgs(args, envTimeout);
  switch (parsed.action) {
    case Action::Help:
      fputs(usageText().c_str(), stdout);
      return 0;
    case Action::Params:
      fputs(params.dump().c_str(), stdout);
      return 0;
    case Action::Error:
      fprintf(stderr, "ferry-run: %s\n%s", parsed.error.c_str(), usageText().c_str());
      return kUsageExit;
    case Action::Run:
      break;
  }
  return launch(parsed.options, params);
}
