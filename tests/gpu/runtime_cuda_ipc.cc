// Legacy CUDA IPC between two processes on two GPUs through the Runtime
// interface: the parent (device 0) exports an allocation, the child (device 1)
// imports it, writes random data into it across the peer link and later reads
// the parent's data back out. Prints SKIPPED and exits 77 with fewer than two
// GPUs or without CUDA in the build; 0 = pass.
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

using ferry::UniqueFd;
using namespace ferry::rt;

constexpr int kSkip = 77;
constexpr int64_t kTimeoutMs = 60000;

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "[%s %d] check failed: %s (%s:%d)\n", role, getpid(), #cond, __FILE__, \
              __LINE__);                                                                     \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

struct Wire {
  uint64_t seed;
  IpcDescriptor desc;  // its fd field is meaningless here (legacy handles have none)
};

std::vector<uint64_t> pattern(uint64_t seed, uint64_t stream, size_t n) {
  ferry::test::Rng rng(seed, stream);
  std::vector<uint64_t> v(n);
  for (auto& w : v) w = rng.next();
  return v;
}

long firstMismatch(const std::vector<uint64_t>& got, const std::vector<uint64_t>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) return static_cast<long>(i);
  }
  return -1;
}

// Both processes decide independently (CUDA must not be initialised before
// fork), so both agree on skipping.
bool haveTwoGpus(Runtime** rt) {
  int count = 0;
  return cudaBuilt() && getRuntime(RuntimeKind::Cuda, rt) == ncclSuccess &&
         (*rt)->deviceCount(&count) == ncclSuccess && count >= 2;
}

int runChild(int sock) {
  const char* role = "child";
  Runtime* rt = nullptr;
  if (!haveTwoGpus(&rt)) return kSkip;
  CHECK(rt->setDevice(1) == ncclSuccess);
  Wire wire{};
  CHECK(ferry::unixRecvExact(sock, &wire, sizeof(wire), nullptr, 0, nullptr, kTimeoutMs) ==
        ncclSuccess);
  wire.desc.fd = -1;
  std::unique_ptr<IpcMapping> map;
  CHECK(rt->importIpc(wire.desc, &map) == ncclSuccess);
  size_t n = map->size() / sizeof(uint64_t);
  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  auto mine = pattern(wire.seed, 1, n);
  CHECK(s->copyAsync(map->ptr(), mine.data(), map->size()) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  char msg = 'W';
  CHECK(ferry::unixSendMsg(sock, &msg, 1, nullptr, 0, kTimeoutMs) == ncclSuccess);
  CHECK(ferry::unixRecvExact(sock, &msg, 1, nullptr, 0, nullptr, kTimeoutMs) == ncclSuccess);
  CHECK(msg == 'P');
  // Peer memory -> local device memory -> host, all through the stream.
  std::unique_ptr<DeviceMemory> local;
  CHECK(rt->allocDevice(map->size(), &local) == ncclSuccess);
  std::vector<uint64_t> got(n, 0xA5A5A5A5A5A5A5A5ull);
  CHECK(s->copyAsync(local->ptr(), map->ptr(), map->size()) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), local->ptr(), map->size()) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  long bad = firstMismatch(got, pattern(wire.seed, 2, n));
  if (bad >= 0) fprintf(stderr, "[child] word %ld differs\n", bad);
  msg = bad < 0 ? 'D' : 'F';
  CHECK(ferry::unixSendMsg(sock, &msg, 1, nullptr, 0, kTimeoutMs) == ncclSuccess);
  return bad < 0 ? 0 : 1;
}

int waitChild(pid_t child) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  int status = 0;
  while (waitpid(child, &status, WNOHANG) != child) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int runParent(int sock, pid_t child, uint64_t seed) {
  const char* role = "parent";
  Runtime* rt = nullptr;
  if (!haveTwoGpus(&rt)) {
    waitChild(child);
    return kSkip;
  }
  CHECK(rt->setDevice(0) == ncclSuccess);
  ferry::test::Rng rng(seed, 0);
  size_t n = 1 + rng.below(8 << 20);
  size_t bytes = n * sizeof(uint64_t);
  std::unique_ptr<DeviceMemory> mem;
  CHECK(rt->allocDevice(bytes, &mem) == ncclSuccess);
  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  std::vector<uint64_t> poison(n, 0xA5A5A5A5A5A5A5A5ull);
  CHECK(s->copyAsync(mem->ptr(), poison.data(), bytes) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  Wire wire{};
  wire.seed = seed;
  CHECK(rt->exportIpc(*mem, &wire.desc) == ncclSuccess);
  CHECK(wire.desc.type == IpcDescriptor::Type::CudaLegacy && wire.desc.size == bytes);
  CHECK(ferry::unixSendMsg(sock, &wire, sizeof(wire), nullptr, 0, kTimeoutMs) == ncclSuccess);
  char msg = 0;
  CHECK(ferry::unixRecvExact(sock, &msg, 1, nullptr, 0, nullptr, kTimeoutMs) == ncclSuccess);
  CHECK(msg == 'W');
  std::vector<uint64_t> got(n, 0);
  CHECK(s->copyAsync(got.data(), mem->ptr(), bytes) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  long bad = firstMismatch(got, pattern(seed, 1, n));
  if (bad >= 0) fprintf(stderr, "[parent] word %ld differs from the child's data\n", bad);
  CHECK(bad < 0);
  auto mine = pattern(seed, 2, n);
  CHECK(s->copyAsync(mem->ptr(), mine.data(), bytes) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  msg = 'P';
  CHECK(ferry::unixSendMsg(sock, &msg, 1, nullptr, 0, kTimeoutMs) == ncclSuccess);
  CHECK(ferry::unixRecvExact(sock, &msg, 1, nullptr, 0, nullptr, kTimeoutMs) == ncclSuccess);
  CHECK(msg == 'D');
  CHECK(waitChild(child) == 0);
  return 0;
}

}  // namespace

int main() {
  uint64_t seed = ferry::test::testSeed();
  UniqueFd parentEnd, childEnd;
  if (ferry::unixSocketPair(&parentEnd, &childEnd) != ncclSuccess) return 1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();  // before any CUDA call: CUDA does not survive fork
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
  if (rc != 0 && rc != kSkip) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  printf("runtime_cuda_ipc: %s\n", rc == 0 ? "PASSED" : rc == kSkip ? "SKIPPED" : "FAILED");
  return rc;
}
