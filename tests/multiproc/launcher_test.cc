// ferry-run end to end: real rank processes, the launcher's exit codes,
// timing, output prefixes and that no rank outlives it.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/random.h"
#include "launcher_lines.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

// A started command whose stdout and stderr are captured.
class Child {
 public:
  // `env` entries NAME=VALUE replace inherited ones; "NAME" alone removes it.
  Child(std::vector<std::string> argv, const std::vector<std::string>& env = {}) {
    std::vector<std::string> envStrings = mergedEnv(env);
    int outPipe[2], errPipe[2];
    if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0) return;
    std::vector<char*> cArgv, cEnv;
    for (auto& a : argv) cArgv.push_back(a.data());
    cArgv.push_back(nullptr);
    for (auto& e : envStrings) cEnv.push_back(e.data());
    cEnv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(outPipe[1], STDOUT_FILENO);
      dup2(errPipe[1], STDERR_FILENO);
      execve(cArgv[0], cArgv.data(), cEnv.data());
      _exit(126);
    }
    close(outPipe[1]);
    close(errPipe[1]);
    outFd_ = outPipe[0];
    errFd_ = errPipe[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (outFd_ >= 0) close(outFd_);
    if (errFd_ >= 0) close(errFd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // Reads all output and reaps; SIGKILLs the command past `limitSec`.
  void finish(double limitSec) {
    auto deadline = start_ + std::chrono::duration<double>(limitSec);
    while (outFd_ >= 0 || errFd_ >= 0) {
      if (Clock::now() > deadline && !hitLimit) {
        hitLimit = true;
        kill(pid_, SIGKILL);
      }
      pollfd fds[2] = {{outFd_, POLLIN, 0}, {errFd_, POLLIN, 0}};
      poll(fds, 2, 100);
      readSome(&outFd_, &out, fds[0].revents);
      readSome(&errFd_, &err, fds[1].revents);
    }
    int s = 0;
    waitpid(pid_, &s, 0);
    reaped_ = true;
    seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    status = s;
  }

  int exitCode() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

  std::string out, err;
  int status = 0;
  double seconds = 0;
  bool hitLimit = false;

 private:
  static std::vector<std::string> mergedEnv(const std::vector<std::string>& changes) {
    std::set<std::string> names;
    for (const auto& c : changes) names.insert(c.substr(0, c.find('=')));
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      if (names.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
    }
    for (const auto& c : changes) {
      if (c.find('=') != std::string::npos) env.push_back(c);
    }
    return env;
  }
  static void readSome(int* fd, std::string* sink, short revents) {
    if (*fd < 0 || revents == 0) return;
    char buf[65536];
    ssize_t n = read(*fd, buf, sizeof(buf));
    if (n > 0) {
      sink->append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      close(*fd);
      *fd = -1;
    }
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int outFd_ = -1, errFd_ = -1;
  Clock::time_point start_;
};

// A temporary directory for pid files, removed with its files.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ferry-launcher-XXXXXX";
    path = mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
          unlink((path + "/" + e->d_name).c_str());
        }
      }
      closedir(d);
    }
    rmdir(path.c_str());
  }
  // The pid in <path>/<name>, or -1.
  pid_t pid(const std::string& name) const {
    std::ifstream in(path + "/" + name);
    int p = -1;
    in >> p;
    return p;
  }
  // Waits up to `limitSec` for `n` files pid.0 .. pid.<n-1>.
  bool awaitPids(int n, double limitSec) const {
    auto deadline = Clock::now() + std::chrono::duration<double>(limitSec);
    while (Clock::now() < deadline) {
      int found = 0;
      for (int r = 0; r < n; ++r) found += pid("pid." + std::to_string(r)) > 0;
      if (found == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::string path;
};

std::vector<std::string> launcher(std::vector<std::string> args) {
  args.insert(args.begin(), FERRY_RUN_PATH);
  return args;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// Gone: no such process. With `allowZombie`, an unreaped corpse (orphans
// reparented to a pid 1 that does not reap) also counts as gone.
bool processGone(pid_t pid, bool allowZombie = false) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  if (!allowZombie) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = all.rfind(')');
  return paren != std::string::npos && paren + 2 < all.size() && all[paren + 2] == 'Z';
}

bool awaitGone(pid_t pid, double limitSec) {
  auto deadline = Clock::now() + std::chrono::duration<double>(limitSec);
  while (!processGone(pid, true)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void expectRanksGone(const TempDir& dir, int nranks) {
  for (int r = 0; r < nranks; ++r) {
    pid_t p = dir.pid("pid." + std::to_string(r));
    if (p <= 0) continue;  // killed before it wrote its file: nothing to check
    EXPECT_TRUE(processGone(p)) << "rank " << r << " (pid " << p << ") survived";
  }
}

TEST(Launcher, EnvironmentIsConsistentAndDistinct) {
  Child c(launcher({"-n", "4", "--runtime", "host", LAUNCHER_RANK_PATH, "env"}));
  c.finish(30);
  ASSERT_EQ(c.exitCode(), 0) << c.err;
  std::map<int, std::map<std::string, std::string>> vars;  // rank -> name -> value
  for (const std::string& line : lines(c.out)) {
    ASSERT_EQ(line[0], '[') << line;
    int rank = std::atoi(line.c_str() + 1);
    std::string prefix = "[" + std::to_string(rank) + "] ";
    ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
    std::string kv = line.substr(prefix.size());
    vars[rank][kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  ASSERT_EQ(vars.size(), 4u) << c.out;
  std::set<std::string> pids;
  for (int r = 0; r < 4; ++r) {
    auto& v = vars[r];
    EXPECT_EQ(v["RANK"], std::to_string(r));
    EXPECT_EQ(v["FERRY_RANK"], std::to_string(r));
    EXPECT_EQ(v["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(v["WORLD_SIZE"], "4");
    EXPECT_EQ(v["FERRY_NRANKS"], "4");
    EXPECT_EQ(v["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(v["FERRY_RUNTIME"], "host");
    EXPECT_EQ(v["FERRY_DEVICE"], std::to_string(r));  // r mod FERRY_HOST_DEVICES (8)
    EXPECT_EQ(v["NCCL_COMM_ID"], vars[0]["NCCL_COMM_ID"]);
    EXPECT_EQ(v["MASTER_PORT"], vars[0]["MASTER_PORT"]);
    pids.insert(v["PID"]);
    EXPECT_NE(c.err.find("[" + std::to_string(r) + "] stderr of rank " + std::to_string(r)),
              std::string::npos)
        << c.err;
  }
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_NE(vars[0]["NCCL_COMM_ID"].find("127.0.0.1:"), std::string::npos);
}

TEST(Launcher, GpuAssignmentWithoutCuda) {
  // The launcher counts GPUs from CUDA_VISIBLE_DEVICES; no CUDA call is made.
  Child c(launcher({"-n", "3", "--runtime", "cuda", "--isolate-gpus", LAUNCHER_RANK_PATH, "env"}),
          {"CUDA_VISIBLE_DEVICES=5,GPU-x"});
  c.finish(30);
  ASSERT_EQ(c.exitCode(), 0) << c.err;
  for (int r = 0; r < 3; ++r) {
    std::string p = "[" + std::to_string(r) + "] ";
    EXPECT_NE(c.out.find(p + "CUDA_VISIBLE_DEVICES=" + (r % 2 ? "GPU-x" : "5")), std::string::npos);
    EXPECT_NE(c.out.find(p + "FERRY_DEVICE=0"), std::string::npos);
    EXPECT_NE(c.out.find(p + "FERRY_RUNTIME=cuda"), std::string::npos);
  }
  Child none(launcher({"-n", "2", "--runtime", "cuda", LAUNCHER_RANK_PATH, "env"}),
             {"CUDA_VISIBLE_DEVICES="});
  none.finish(30);
  EXPECT_NE(none.exitCode(), 0);
  EXPECT_NE(none.err.find("no GPU"), std::string::npos) << none.err;
}

TEST(Launcher, FailingRankStopsTheOthers) {
  TempDir dir;
  Child c(launcher({"-n", "4", LAUNCHER_RANK_PATH, "fail", dir.path, "2", "3"}));
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 3) << c.err;
  EXPECT_LT(c.seconds, 10) << "ranks sleep 60 s; the launcher must not wait for them";
  EXPECT_NE(c.err.find("ferry-run: rank 2 exited with code 3"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("[2] rank 2 failing on purpose"), std::string::npos) << c.err;
  for (int r = 0; r < 4; ++r) EXPECT_GT(dir.pid("pid." + std::to_string(r)), 0) << r;
  expectRanksGone(dir, 4);
}

TEST(Launcher, TimeoutKillsAllAndExits124) {
  TempDir dir;
  Child c(launcher({"-n", "4", "--timeout", "2", LAUNCHER_RANK_PATH, "sleep", dir.path}));
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 124) << c.err;
  EXPECT_GE(c.seconds, 1.9);
  EXPECT_LT(c.seconds, 7);
  EXPECT_NE(c.err.find("timeout"), std::string::npos) << c.err;
  expectRanksGone(dir, 4);
}

TEST(Launcher, TimeoutFromEnvironment) {
  TempDir dir;
  Child c(launcher({"-n", "2", LAUNCHER_RANK_PATH, "sleep", dir.path}), {"FERRY_RUN_TIMEOUT=1"});
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 124) << c.err;
  EXPECT_LT(c.seconds, 6);
  expectRanksGone(dir, 2);
}

TEST(Launcher, RankKilledBySignalIsReported) {
  TempDir dir;
  Child c(launcher({"-n", "4", LAUNCHER_RANK_PATH, "sigkill", dir.path, "1"}));
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 128 + SIGKILL) << c.err;
  EXPECT_NE(c.err.find("ferry-run: rank 1 killed by signal 9"), std::string::npos) << c.err;
  EXPECT_LT(c.seconds, 10);
  expectRanksGone(dir, 4);
}

TEST(Launcher, RanksIgnoringSigtermGetSigkill) {
  TempDir dir;
  Child c(launcher({"-n", "3", LAUNCHER_RANK_PATH, "ignoreterm", dir.path, "5"}));
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 5) << c.err;
  EXPECT_GE(c.seconds, 2.9) << "SIGKILL comes 3 s after SIGTERM";
  EXPECT_LT(c.seconds, 10);
  expectRanksGone(dir, 3);
}

TEST(Launcher, ProcessesStartedByARankAreStoppedToo) {
  TempDir dir;
  Child c(launcher({"-n", "2", LAUNCHER_RANK_PATH, "grandchild", dir.path}));
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 3) << c.err;
  EXPECT_LT(c.seconds, 10) << "the grandchild holds rank 0's stdout open";
  pid_t grandchild = dir.pid("gpid.0");
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(awaitGone(grandchild, 5));
  expectRanksGone(dir, 2);
}

TEST(Launcher, SigtermIsForwarded) {
  TempDir dir;
  Child c(launcher({"-n", "3", LAUNCHER_RANK_PATH, "sleep", dir.path}));
  ASSERT_TRUE(dir.awaitPids(3, 20));
  kill(c.pid(), SIGTERM);
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 128 + SIGTERM) << c.err;
  EXPECT_LT(c.seconds, 10);
  expectRanksGone(dir, 3);
}

TEST(Launcher, RanksDieWithTheLauncher) {
  TempDir dir;
  Child c(launcher({"-n", "3", LAUNCHER_RANK_PATH, "sleep", dir.path}));
  ASSERT_TRUE(dir.awaitPids(3, 20));
  kill(c.pid(), SIGKILL);
  c.finish(30);
  for (int r = 0; r < 3; ++r) {
    pid_t p = dir.pid("pid." + std::to_string(r));
    EXPECT_TRUE(awaitGone(p, 5)) << "rank " << r << " outlived a SIGKILLed launcher";
  }
}

TEST(Launcher, LongLinesAreNeverInterleaved) {
  const uint64_t seed = ferry::test::testSeed();
  const int kRanks = 4, kLines = 1000, kMaxLen = 3000;
  Child c(launcher({"-n", std::to_string(kRanks), LAUNCHER_RANK_PATH, "lines", std::to_string(seed),
                    std::to_string(kLines), std::to_string(kMaxLen)}));
  c.finish(60);
  ASSERT_EQ(c.exitCode(), 0) << c.err.substr(0, 2000);
  std::vector<int> nextOut(kRanks, 0), nextErr(kRanks, 0);
  auto check = [&](const std::string& text, std::vector<int>* next, bool onStderr) {
    for (const std::string& line : lines(text)) {
      int rank = std::atoi(line.c_str() + 1);
      ASSERT_TRUE(rank >= 0 && rank < kRanks) << line.substr(0, 80);
      std::string prefix = "[" + std::to_string(rank) + "] ";
      ASSERT_EQ(line.rfind(prefix, 0), 0u) << line.substr(0, 80);
      int& i = (*next)[static_cast<size_t>(rank)];
      while (i < kLines && (i % 10 == 9) != onStderr) ++i;  // lines of the other stream
      ASSERT_LT(i, kLines) << "extra line from rank " << rank;
      ASSERT_EQ(line.substr(prefix.size()), ferry::test::launcherLine(seed, rank, i, kMaxLen))
          << "rank " << rank << " line " << i << " is torn or out of order";
      ++i;
    }
  };
  check(c.out, &nextOut, false);
  check(c.err, &nextErr, true);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_GE(nextOut[static_cast<size_t>(r)], kLines - 1) << "rank " << r << " lost stdout lines";
    EXPECT_EQ(nextErr[static_cast<size_t>(r)], kLines) << "rank " << r << " lost stderr lines";
  }
}

TEST(Launcher, PartialFinalLinesAreFlushed) {
  Child c(launcher({"-n", "2", LAUNCHER_RANK_PATH, "partial"}));
  c.finish(30);
  ASSERT_EQ(c.exitCode(), 0) << c.err;
  EXPECT_NE(c.out.find("[0] no-newline-0\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("[1] no-newline-1\n"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("[0] err-partial-0\n"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("[1] err-partial-1\n"), std::string::npos) << c.err;
}

TEST(Launcher, ExecFailureIsReported) {
  Child c(launcher({"-n", "2", "/nonexistent/ferry-no-such-program"}));
  c.finish(30);
  EXPECT_EQ(c.exitCode(), 127) << c.err;
  EXPECT_NE(c.err.find("cannot execute"), std::string::npos) << c.err;
}

TEST(Launcher, UsageHelpAndParams) {
  for (std::vector<std::string> bad : {std::vector<std::string>{},
                                       {"prog"},
                                       {"-n", "0", "prog"},
                                       {"-n", "2"},
                                       {"--wat", "-n", "2", "prog"}}) {
    Child c(launcher(bad));
    c.finish(30);
    EXPECT_EQ(c.exitCode(), 2);
    EXPECT_NE(c.err.find("usage: ferry-run"), std::string::npos) << c.err;
    EXPECT_EQ(c.out, "");
  }
  Child help(launcher({"--help"}));
  help.finish(30);
  EXPECT_EQ(help.exitCode(), 0);
  EXPECT_NE(help.out.find("usage: ferry-run"), std::string::npos);
  Child params(launcher({"--params"}));
  params.finish(30);
  EXPECT_EQ(params.exitCode(), 0);
  EXPECT_NE(params.out.find("NCCL_COMM_ID"), std::string::npos) << params.out;
  EXPECT_NE(params.out.find("FERRY_RUN_TIMEOUT"), std::string::npos) << params.out;
}

}  // namespace
