// Host-runtime IPC across two real processes: the parent allocates "device"
// memory after fork (so the child has no inherited mapping), passes the memfds
// over a Unix socket, and both sides exchange random data and run a
// writeValue64/waitValue64 handshake on shared words through their streams.
// Exit status 0 = pass; the failing check is printed otherwise.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "common/random.h"
#include "core/unix_socket.h"
#include "runtime/runtime.h"

namespace {

using ferry::Status;
using ferry::UniqueFd;
using namespace ferry::rt;

constexpr int64_t kTimeoutMs = 30000;
constexpr uint64_t kRounds = 500;
// Words of the shared control block.
enum Word { kChildWrote = 0, kParentWrote = 1, kPing = 2, kPong = 3, kWords = 8 };

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "[%s %d] check failed: %s (%s:%d)\n", role, getpid(), #cond, __FILE__, \
              __LINE__);                                                                     \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

// What travels with the two memfds (nothing process-local).
struct Wire {
  uint64_t seed;
  uint64_t dataSize, dataOffset;
  uint64_t ctrlSize, ctrlOffset;
};

std::vector<uint64_t> pattern(uint64_t seed, uint64_t stream, size_t words) {
  ferry::test::Rng rng(seed, stream);
  std::vector<uint64_t> v(words);
  for (auto& w : v) w = rng.next();
  return v;
}

// Index of the first word differing from the reference, or -1.
long compareWords(const uint64_t* got, const std::vector<uint64_t>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) return static_cast<long>(i);
  }
  return -1;
}

int runChild(int sock) {
  const char* role = "child";
  Runtime* rt = nullptr;
  CHECK(getRuntime(RuntimeKind::Host, &rt) == ncclSuccess);
  Wire wire{};
  UniqueFd fds[2];
  int numFds = 0;
  CHECK(ferry::unixRecvExact(sock, &wire, sizeof(wire), fds, 2, &numFds, kTimeoutMs) ==
        ncclSuccess);
  CHECK(numFds == 2);
  IpcDescriptor data, ctrl;
  data.type = ctrl.type = IpcDescriptor::Type::HostMemfd;
  data.size = wire.dataSize;
  data.offset = wire.dataOffset;
  data.fd = fds[0].release();
  ctrl.size = wire.ctrlSize;
  ctrl.offset = wire.ctrlOffset;
  ctrl.fd = fds[1].release();
  std::unique_ptr<IpcMapping> dataMap, ctrlMap;
  CHECK(rt->importIpc(data, &dataMap) == ncclSuccess);
  CHECK(rt->importIpc(ctrl, &ctrlMap) == ncclSuccess);
  auto* words = static_cast<uint64_t*>(ctrlMap->ptr());
  size_t n = wire.dataSize / sizeof(uint64_t);

  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  // 1. Child writes pattern 1 through its stream, then raises kChildWrote.
  auto mine = pattern(wire.seed, 1, n);
  CHECK(s->copyAsync(dataMap->ptr(), mine.data(), wire.dataSize) == ncclSuccess);
  CHECK(s->writeValue64(&words[kChildWrote], 1) == ncclSuccess);
  // 2. After the parent's kParentWrote, copy the parent's pattern 2 out.
  std::vector<uint64_t> got(n, 0xA5A5A5A5A5A5A5A5ull);
  CHECK(s->waitValue64(&words[kParentWrote], 1, WaitCondition::Eq) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), dataMap->ptr(), wire.dataSize) == ncclSuccess);
  // 3. Ping-pong: answer every ping i with pong i, all enqueued up front.
  for (uint64_t i = 1; i <= kRounds; ++i) {
    CHECK(s->waitValue64(&words[kPing], i, WaitCondition::Geq) == ncclSuccess);
    CHECK(s->writeValue64(&words[kPong], i) == ncclSuccess);
  }
  CHECK(s->synchronize() == ncclSuccess);
  long bad = compareWords(got.data(), pattern(wire.seed, 2, n));
  if (bad >= 0) fprintf(stderr, "[child] word %ld differs from the parent's pattern\n", bad);
  CHECK(bad < 0);
  char done = 'D';
  CHECK(ferry::unixSendMsg(sock, &done, 1, nullptr, 0, kTimeoutMs) == ncclSuccess);
  return 0;
}

int runParent(int sock, pid_t child, uint64_t seed) {
  const char* role = "parent";
  Runtime* rt = nullptr;
  CHECK(getRuntime(RuntimeKind::Host, &rt) == ncclSuccess);
  ferry::test::Rng rng(seed, 0);
  size_t n = 1 + rng.below(1 << 18);  // up to 2 MiB of words
  std::unique_ptr<DeviceMemory> data, ctrl;
  CHECK(rt->allocDevice(n * sizeof(uint64_t), &data) == ncclSuccess);
  CHECK(rt->allocDevice(kWords * sizeof(uint64_t), &ctrl) == ncclSuccess);
  memset(data->ptr(), 0xA5, n * sizeof(uint64_t));  // poison
  memset(ctrl->ptr(), 0, kWords * sizeof(uint64_t));
  auto* words = static_cast<uint64_t*>(ctrl->ptr());

  IpcDescriptor dd, cd;
  CHECK(rt->exportIpc(*data, &dd) == ncclSuccess);
  CHECK(rt->exportIpc(*ctrl, &cd) == ncclSuccess);
  UniqueFd dfd(dd.fd), cfd(cd.fd);  // ours to close once sent
  Wire wire{seed, dd.size, dd.offset, cd.size, cd.offset};
  int fds[] = {dfd.get(), cfd.get()};
  CHECK(ferry::unixSendMsg(sock, &wire, sizeof(wire), fds, 2, kTimeoutMs) == ncclSuccess);

  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  // 1. Wait (in stream order) for the child's data, copy it out, verify.
  std::vector<uint64_t> got(n, 0xA5A5A5A5A5A5A5A5ull);
  CHECK(s->waitValue64(&words[kChildWrote], 1, WaitCondition::Eq) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), data->ptr(), n * sizeof(uint64_t)) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  long bad = compareWords(got.data(), pattern(seed, 1, n));
  if (bad >= 0) fprintf(stderr, "[parent] word %ld differs from the child's pattern\n", bad);
  CHECK(bad < 0);
  // 2. Write pattern 2 and tell the child.
  auto mine = pattern(seed, 2, n);
  CHECK(s->copyAsync(data->ptr(), mine.data(), n * sizeof(uint64_t)) == ncclSuccess);
  CHECK(s->writeValue64(&words[kParentWrote], 1) == ncclSuccess);
  // 3. Ping-pong across the processes.
  for (uint64_t i = 1; i <= kRounds; ++i) {
    CHECK(s->writeValue64(&words[kPing], i) == ncclSuccess);
    CHECK(s->waitValue64(&words[kPong], i, WaitCondition::Eq) == ncclSuccess);
  }
  CHECK(s->synchronize() == ncclSuccess);
  CHECK(std::atomic_ref<uint64_t>(words[kPong]).load(std::memory_order_acquire) == kRounds);
  char done = 0;
  CHECK(ferry::unixRecvExact(sock, &done, 1, nullptr, 0, nullptr, kTimeoutMs) == ncclSuccess);
  CHECK(done == 'D');

  // The child must exit 0 within the timeout (never hang the test).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  int status = 0;
  for (;;) {
    pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      fprintf(stderr, "[parent] child did not exit\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return 0;
}

}  // namespace

int main() {
  uint64_t seed = ferry::test::testSeed();
  UniqueFd parentEnd, childEnd;
  if (ferry::unixSocketPair(&parentEnd, &childEnd) != ncclSuccess) return 1;
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    parentEnd.reset();
    _exit(runChild(childEnd.get()));
  }
  childEnd.reset();
  int rc = runParent(parentEnd.get(), pid, seed);
  if (rc != 0) {
    // On failure, never leave the child behind.
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  printf("runtime_ipc: %s (n rounds %lu)\n", rc == 0 ? "PASSED" : "FAILED",
         static_cast<unsigned long>(kRounds));
  return rc;
}
