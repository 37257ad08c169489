// The rank program that tests/multiproc/launcher_test.cc starts under
// ferry-run. One mode per behaviour the launcher must handle:
//   env                      check and print the launcher's variables
//   fail <dir> <rank> <code> rank <rank> exits <code> once every rank wrote
//                            its pid file; the others sleep 60 s
//   sigkill <dir> <rank>     the same, but rank <rank> dies by SIGKILL
//   sleep <dir>              every rank writes its pid file and sleeps 60 s
//   ignoreterm <dir> <code>  ranks > 0 ignore SIGTERM and sleep; rank 0 exits
//                            <code> once every pid file exists
//   grandchild <dir>         rank 0 forks a child that sleeps (gpid.0); the
//                            last rank exits 3 once all pid files exist
//   lines <seed> <count> <maxlen>  prints `count` long lines (one in ten on
//                            stderr), each in random-sized write() pieces
//   partial                  prints a stdout and a stderr line without newline
// Pid files are <dir>/pid.<rank> (written whole via rename).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/proc.h"
#include "common/random.h"
#include "core/env.h"
#include "launcher_lines.h"

namespace {

using ferry::test::LaunchEnv;

void writePidFile(const std::string& dir, const std::string& name, pid_t pid) {
  std::string tmp = dir + "/." + name + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(90);
  fprintf(f, "%d\n", static_cast<int>(pid));
  fclose(f);
  if (rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) std::exit(91);
}

// Waits (at most 20 s) until every rank has written its pid file.
void awaitAllPidFiles(const std::string& dir, int nranks) {
  for (int tries = 0; tries < 2000; ++tries) {
    int present = 0;
    for (int r = 0; r < nranks; ++r) {
      if (access((dir + "/pid." + std::to_string(r)).c_str(), F_OK) == 0) ++present;
    }
    if (present == nranks) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fprintf(stderr, "pid files did not all appear\n");
  std::exit(92);
}

void sleepLong() {
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

int envMode(const LaunchEnv& env) {
  // The launcher's torchrun-style names must agree with its own.
  auto var = [](const char* name) { return ferry::envString(name); };
  bool ok = var("RANK") == std::to_string(env.rank) &&
            var("WORLD_SIZE") == std::to_string(env.nranks) && env.localRank == env.rank &&
            env.localNranks == env.nranks && env.commId.rfind("127.0.0.1:", 0) == 0 &&
            var("MASTER_ADDR") == "127.0.0.1" && env.device >= 0;
  int port = std::atoi(env.commId.c_str() + 10);
  ok = ok && port > 0 && port < 65536 && std::to_string(port) == env.commId.substr(10);
  ok = ok && var("MASTER_PORT") != std::to_string(port);
  const char* names[] = {"RANK",         "WORLD_SIZE",   "LOCAL_RANK",   "LOCAL_WORLD_SIZE",
                         "FERRY_RANK",   "FERRY_NRANKS", "NCCL_COMM_ID", "MASTER_PORT",
                         "FERRY_DEVICE", "FERRY_RUNTIME"};
  for (const char* name : names) printf("%s=%s\n", name, var(name).c_str());
  printf("CUDA_VISIBLE_DEVICES=%s\n",
         ferry::envIsSet("CUDA_VISIBLE_DEVICES") ? var("CUDA_VISIBLE_DEVICES").c_str() : "<unset>");
  printf("PID=%d\n", static_cast<int>(getpid()));
  fflush(stdout);
  fprintf(stderr, "stderr of rank %d\n", env.rank);
  if (!ok) fprintf(stderr, "inconsistent launcher variables\n");
  return ok ? 0 : 1;
}

int linesMode(const LaunchEnv& env, uint64_t seed, int count, int maxLen) {
  ferry::test::Rng chunks(seed, 1000 + static_cast<uint64_t>(env.rank));
  for (int i = 0; i < count; ++i) {
    int fd = i % 10 == 9 ? STDERR_FILENO : STDOUT_FILENO;
    std::string line = ferry::test::launcherLine(seed, env.rank, i, maxLen) + "\n";
    // Random-sized pieces, so the launcher sees lines split across reads.
    size_t at = 0;
    while (at < line.size()) {
      size_t piece = std::min<size_t>(line.size() - at, 1 + chunks.below(700));
      if (write(fd, line.data() + at, piece) != static_cast<ssize_t>(piece)) return 93;
      at += piece;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  LaunchEnv env = ferry::test::launchEnv();
  std::string mode = argc > 1 ? argv[1] : "";
  std::string dir = argc > 2 ? argv[2] : "";
  if (mode == "env") return envMode(env);
  if (mode == "partial") {
    printf("no-newline-%d", env.rank);
    fprintf(stderr, "err-partial-%d", env.rank);
    return 0;
  }
  if (mode == "lines" && argc == 5) {
    return linesMode(env, std::strtoull(argv[2], nullptr, 10), std::atoi(argv[3]),
                     std::atoi(argv[4]));
  }
  if (mode == "ignoreterm" && argc == 4 && env.rank > 0) signal(SIGTERM, SIG_IGN);
  if (mode == "grandchild" && env.rank == 0) {
    pid_t child = fork();
    if (child == 0) {
      sleepLong();
      _exit(0);
    }
    writePidFile(dir, "gpid.0", child);
  }
  if (mode != "fail" && mode != "sigkill" && mode != "sleep" && mode != "ignoreterm" &&
      mode != "grandchild") {
    fprintf(stderr, "launcher_rank: bad arguments\n");
    return 64;
  }
  writePidFile(dir, "pid." + std::to_string(env.rank), getpid());
  int actor = argc > 3 ? std::atoi(argv[3]) : -1;
  if (mode == "ignoreterm") actor = 0;
  if (mode == "grandchild") actor = env.nranks - 1;
  if (mode != "sleep" && env.rank == actor) {
    awaitAllPidFiles(dir, env.nranks);
    fprintf(stderr, "rank %d failing on purpose\n", env.rank);
    if (mode == "sigkill") raise(SIGKILL);
    if (mode == "grandchild") return 3;
    return std::atoi(argv[mode == "ignoreterm" ? 3 : 4]);
  }
  sleepLong();
  return 0;
}
