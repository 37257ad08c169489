#include "ferry_bench/compare.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "ferry_bench/rendezvous.h"
#include "ferry_bench/report.h"
#include "ferry_bench/results.h"
#include "ferry_bench/runner.h"

namespace ferry::bench {
namespace {

constexpr int kConnectTimeoutSec = 120;
// Children run collectives together, so they finish close to one another; a
// rank still busy this long after this one's child ended is stuck.
constexpr int kBarrierTimeoutSec = 900;

// A temporary file removed with the object.
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  bool create(std::string* error) {
    const char* dir = getenv("TMPDIR");
    std::string pattern =
        std::string(dir != nullptr && *dir ? dir : "/tmp") + "/ferry-bench-XXXXXX";
    const int fd = mkstemp(pattern.data());
    if (fd < 0) {
      *error = "mkstemp " + pattern + ": " + strerror(errno);
      return false;
    }
    close(fd);
    path_ = pattern;
    return true;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs this program again with `args`; NCCL_COMM_ID=commId when not empty.
// Returns its exit code (1 when it died of a signal).
int runChild(const std::vector<std::string>& args, const std::string& commId) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "ferry-bench: fork: %s\n", strerror(errno));
    return kExitSetup;
  }
  if (pid == 0) {
    // The child must not outlive a parent killed by the launcher's timeout.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kExitSetup);
    if (!commId.empty()) setenv("NCCL_COMM_ID", commId.c_str(), 1);
    std::vector<char*> argv;
    static char self[] = "ferry-bench";
    argv.push_back(self);
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    fprintf(stderr, "ferry-bench: exec /proc/self/exe: %s\n", strerror(errno));
    _exit(kExitSetup);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return kExitSetup;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fprintf(stderr, "ferry-bench: child for the run died of signal %d\n", WTERMSIG(status));
  return kExitWrong;
}

bool readResult(const std::string& path, RunResult* result, std::string* error) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return parseResult(text.str(), result, error);
}

// One library's run in a child; the ranks' worst exit code on every rank.
bool runOne(const Options& options, const LaunchEnv& env, Rendezvous& rv, const std::string& lib,
            uint64_t seed, RunResult* result, bool* haveResult, uint64_t* worst) {
  std::string error, host;
  int basePort = 0;
  uint64_t port = 0;
  if (env.launched()) {
    int p = 0;
    if (!splitHostPort(env.commId, &host, &basePort) ||
        (env.rank == 0 && !pickFreePort(&p, &error))) {
      fprintf(stderr, "ferry-bench: %s\n", error.empty() ? "bad NCCL_COMM_ID" : error.c_str());
      return false;
    }
    port = static_cast<uint64_t>(p);
    if (!rv.broadcast(&port, kConnectTimeoutSec, &error)) {
      fprintf(stderr, "ferry-bench: %s\n", error.c_str());
      return false;
    }
  }
  TempFile out;
  if (!out.create(&error)) {
    fprintf(stderr, "ferry-bench: %s\n", error.c_str());
    return false;
  }
  Options child = options;
  child.compare.clear();
  child.json.clear();
  child.rounds = 1;
  child.lib = lib;
  child.jsonOut = out.path();
  child.seed = seed;
  child.seedSet = true;
  const std::string commId = env.launched() ? host + ":" + std::to_string(port) : "";
  const int code = runChild(toArgs(child), commId);
  *haveResult = readResult(out.path(), result, &error);
  if (!*haveResult && code != kExitSetup) {
    fprintf(stderr, "ferry-bench: no result from the run of %s: %s\n", lib.c_str(), error.c_str());
  }
  *worst = static_cast<uint64_t>(code);
  if (!rv.allMax(worst, kBarrierTimeoutSec, &error)) {
    fprintf(stderr, "ferry-bench: %s\n", error.c_str());
    return false;
  }
  return true;
}

}  // namespace

int runCompare(const Options& options, const LaunchEnv& env, uint64_t seed) {
  const std::string libs[2] = {options.lib.empty() ? "libnccl.so.2" : options.lib, options.compare};
  Rendezvous rv;
  std::string error, host;
  int port = 0;
  if (env.world > 1 && (!splitHostPort(env.commId, &host, &port) ||
                        !rv.open(host, port, env.rank, env.world, kConnectTimeoutSec, &error))) {
    fprintf(stderr,
            "ferry-bench: --compare across %d ranks needs NCCL_COMM_ID (ferry-run sets it)%s%s\n",
            env.world, error.empty() ? "" : ": ", error.c_str());
    return kExitSetup;
  }
  // Rounds alternate the libraries (A B A B ...); both runs of a round use
  // the same data seed, each round a new one.
  std::vector<RunResult> rounds[2];
  uint64_t worst = 0;
  for (int round = 0; round < options.rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      RunResult result;
      bool have = false;
      uint64_t code = 0;
      if (!runOne(options, env, rv, libs[k], seed + static_cast<uint64_t>(round), &result, &have,
                  &code)) {
        return kExitSetup;
      }
      if (have) rounds[k].push_back(std::move(result));
      worst = std::max(worst, code);
    }
  }
  RunResult results[2];
  bool have[2] = {false, false};
  for (int k = 0; k < 2; ++k) {
    have[k] = !rounds[k].empty();
    if (have[k]) results[k] = medianOfRounds(rounds[k]);
  }
  if (env.rank == 0) {
    if (options.rounds > 1) {
      printf(
          "# %d rounds, the libraries in turn; each row is its median round (A: %zu rounds "
          "with results, B: %zu)\n",
          options.rounds, rounds[0].size(), rounds[1].size());
    }
    for (int k = 0; k < 2; ++k) {
      if (have[k])
        printRun(stdout, results[k], options.overlap);
      else
        printf("# %s: the run failed before producing results\n", libs[k].c_str());
    }
    if (have[0] && have[1]) printComparison(stdout, results[0], results[1]);
    if (!options.json.empty() && have[0]) {
      std::ofstream json(options.json);
      json << resultsJson(results[0], have[1] ? &results[1] : nullptr);
      if (!json) fprintf(stderr, "ferry-bench: cannot write %s\n", options.json.c_str());
    }
    fflush(stdout);
  }
  return worst > kExitSetup ? kExitWrong : static_cast<int>(worst);
}

}  // namespace ferry::bench
