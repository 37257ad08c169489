#include "spawn.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/listen_port.h"

namespace ferry::run {

namespace {

// Creates a pipe whose both ends are close-on-exec; the read end non-blocking.
bool makePipe(UniqueFd* readEnd, UniqueFd* writeEnd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  readEnd->reset();
  *readEnd = UniqueFd(fds[0]);
  *writeEnd = UniqueFd(fds[1]);
  return fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0;
}

void writeStr(int fd, const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) {
      s += w;
      n -= static_cast<size_t>(w);
    }
  }
}

// Runs in the forked child: only async-signal-safe calls, then exec.
[[noreturn]] void execChild(int rank, pid_t parent, int outFd, int errFd, char* const* argv,
                            char* const* envp, const sigset_t& childMask) {
  setpgid(0, 0);
  // If the launcher dies, so does the rank. The parent may already be gone
  // before prctl takes effect: check after.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  if (dup2(outFd, STDOUT_FILENO) < 0 || dup2(errFd, STDERR_FILENO) < 0) _exit(127);
  if (rank != 0) {
    int devNull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devNull >= 0) dup2(devNull, STDIN_FILENO);
  }
  // Ignored signals stay ignored across exec; the launcher ignores SIGPIPE.
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) signal(sig, SIG_DFL);
  sigprocmask(SIG_SETMASK, &childMask, nullptr);
  execvpe(argv[0], argv, envp);
  int savedErrno = errno;
  writeStr(STDERR_FILENO, "ferry-run: cannot execute '");
  writeStr(STDERR_FILENO, argv[0]);
  writeStr(STDERR_FILENO, "': ");
  writeStr(STDERR_FILENO, strerror(savedErrno));
  writeStr(STDERR_FILENO, "\n");
  _exit(127);
}

std::vector<char*> cStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

bool spawnRank(int rank, const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const sigset_t& childMask, RankProcess* proc, std::string* error) {
  UniqueFd outWrite, errWrite;
  if (!makePipe(&proc->out, &outWrite) || !makePipe(&proc->err, &errWrite)) {
    *error = std::string("pipe: ") + strerror(errno);
    return false;
  }
  std::vector<char*> cArgv = cStrings(argv);
  std::vector<char*> cEnv = cStrings(env);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    return false;
  }
  if (pid == 0) {
    execChild(rank, parent, outWrite.get(), errWrite.get(), cArgv.data(), cEnv.data(), childMask);
  }
  // Also set the group here: whichever of parent and child runs first, the
  // group exists before the launcher may signal it. EACCES after exec is fine.
  setpgid(pid, pid);
  proc->rank = rank;
  proc->pid = pid;
  return true;  // write ends close here; the child holds its copies
}

bool pickFreePorts(int* first, int* second, std::string* error) {
  // The first checking socket stays bound until the second port is picked,
  // so they differ (core/listen_port.h says why not bind(0)).
  int held = -1;
  if (!pickListenPort(INADDR_LOOPBACK, -1, first, &held, error)) return false;
  UniqueFd keep(held);
  return pickListenPort(INADDR_LOOPBACK, *first, second, nullptr, error);
}

int countProcGpus() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/driver/nvidia/gpus"), closedir);
  if (dir == nullptr) return 0;
  int count = 0;
  while (dirent* entry = readdir(dir.get())) {
    if (entry->d_name[0] != '.') ++count;
  }
  return count;
}

}  // namespace ferry::run
