// Zero-copy support of the host runtime across two real processes, as the
// SM-free path uses it: the parent describes a range inside a "device"
// allocation (describeAllocation), exports the allocation's memfd
// (exportAllocationFd) and sends the whole-allocation descriptor; the child
// maps it (importIpc, offset 0), adds the offset itself and writes random data
// there; the parent checks it (and that nothing outside the range changed),
// then writes the whole allocation for the child to check. The two sides
// synchronise through a memfd control block that both register
// (registerHost): one stream's writeValue64 releases the other's
// waitValue64Spin. Exit status 0 = pass; the failing check is printed.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

constexpr int64_t kTimeoutMs = 30000;
constexpr uint8_t kPoison = 0xA5;
constexpr size_t kCtrlBytes = 4096;
enum Word { kChildWrote = 0, kParentWrote = 1 };

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "[%s %d] check failed: %s (%s:%d)\n", role, getpid(), #cond, __FILE__, \
              __LINE__);                                                                     \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

// What travels with the two fds (data memfd, control memfd): no pointers
// that the child uses, only the description and offsets.
struct Wire {
  uint64_t seed;
  AllocationInfo info;  // info.ipc.fd is -1; the memfd travels by SCM_RIGHTS
  uint64_t offset;      // of the described range inside the allocation
  uint64_t length;
};

std::vector<uint8_t> pattern(uint64_t seed, uint64_t stream, size_t n) {
  ferry::test::Rng rng(seed, stream);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng.next();
    memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

long firstMismatch(const uint8_t* got, const uint8_t* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) return static_cast<long>(i);
  }
  return -1;
}

// A MAP_SHARED mapping of a memfd, unmapped on destruction.
struct SharedPages {
  ~SharedPages() {
    if (base != MAP_FAILED) munmap(base, length);
  }
  bool map(int fd, size_t bytes) {
    length = bytes;
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return base != MAP_FAILED;
  }
  void* base = MAP_FAILED;
  size_t length = 0;
};

int runChild(int sock) {
  const char* role = "child";
  Runtime* rt = nullptr;
  CHECK(getRuntime(RuntimeKind::Host, &rt) == ncclSuccess);
  Wire wire{};
  UniqueFd fds[2];
  int numFds = 0;
  CHECK(ferry::unixRecvExact(sock, &wire, sizeof(wire), fds, 2, &numFds, kTimeoutMs) ==
        ncclSuccess);
  CHECK(numFds == 2 && wire.info.mappable && wire.info.ipc.offset == 0);
  IpcDescriptor desc = wire.info.ipc;
  desc.fd = fds[0].release();
  std::unique_ptr<IpcMapping> whole;
  CHECK(rt->importIpc(desc, &whole) == ncclSuccess);
  CHECK(whole->size() == wire.info.size);
  SharedPages ctrl;
  CHECK(ctrl.map(fds[1].get(), kCtrlBytes));
  std::unique_ptr<HostRegistration> reg;
  CHECK(rt->registerHost(ctrl.base, kCtrlBytes, &reg) == ncclSuccess);
  auto* words = static_cast<uint64_t*>(reg->devicePtr());

  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  // 1. Our data into the parent's range (base of the mapping + offset).
  auto mine = pattern(wire.seed, 1, wire.length);
  auto* range = static_cast<uint8_t*>(whole->ptr()) + wire.offset;
  CHECK(s->copyAsync(range, mine.data(), wire.length) == ncclSuccess);
  CHECK(s->writeValue64(&words[kChildWrote], 1) == ncclSuccess);
  // 2. Once the parent has rewritten the whole allocation, read it all back.
  std::vector<uint8_t> got(wire.info.size, kPoison);
  CHECK(s->waitValue64Spin(&words[kParentWrote], 1) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), whole->ptr(), wire.info.size) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  auto theirs = pattern(wire.seed, 2, wire.info.size);
  long bad = firstMismatch(got.data(), theirs.data(), theirs.size());
  if (bad >= 0) fprintf(stderr, "[child] byte %ld differs from the parent's data\n", bad);
  CHECK(bad < 0);
  char done = 'D';
  CHECK(ferry::unixSendMsg(sock, &done, 1, nullptr, 0, kTimeoutMs) == ncclSuccess);
  return 0;
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
  CHECK(getRuntime(RuntimeKind::Host, &rt) == ncclSuccess);
  ferry::test::Rng rng(seed, 0);
  size_t bytes = 16 + rng.below(4 << 20);
  std::unique_ptr<DeviceMemory> data;
  CHECK(rt->allocDevice(bytes, &data) == ncclSuccess);
  memset(data->ptr(), kPoison, bytes);
  // A range strictly inside, so the child's offset arithmetic matters.
  size_t offset = 1 + rng.below(bytes / 2);
  size_t length = 1 + rng.below(bytes - offset - 1);
  Wire wire{};
  wire.seed = seed;
  wire.offset = offset;
  wire.length = length;
  CHECK(rt->describeAllocation(static_cast<char*>(data->ptr()) + offset, length, &wire.info) ==
        ncclSuccess);
  CHECK(wire.info.mappable && wire.info.base == reinterpret_cast<uint64_t>(data->ptr()));
  CHECK(wire.info.size == bytes && wire.info.ipc.fd == -1);
  UniqueFd dataFd;
  CHECK(rt->exportAllocationFd(wire.info.allocId, &dataFd) == ncclSuccess);
  UniqueFd ctrlFd(memfd_create("ferry-zc-ctrl", MFD_CLOEXEC));
  CHECK(ctrlFd.valid() && ftruncate(ctrlFd.get(), kCtrlBytes) == 0);
  SharedPages ctrl;
  CHECK(ctrl.map(ctrlFd.get(), kCtrlBytes));
  std::unique_ptr<HostRegistration> reg;
  CHECK(rt->registerHost(ctrl.base, kCtrlBytes, &reg) == ncclSuccess);
  auto* words = static_cast<uint64_t*>(reg->devicePtr());
  int fds[] = {dataFd.get(), ctrlFd.get()};
  CHECK(ferry::unixSendMsg(sock, &wire, sizeof(wire), fds, 2, kTimeoutMs) == ncclSuccess);

  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  // 1. In stream order: the child's word, then the whole allocation out.
  std::vector<uint8_t> got(bytes, 0);
  CHECK(s->waitValue64Spin(&words[kChildWrote], 1) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), data->ptr(), bytes) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  auto want = std::vector<uint8_t>(bytes, kPoison);
  auto childData = pattern(seed, 1, length);
  memcpy(want.data() + offset, childData.data(), length);
  long bad = firstMismatch(got.data(), want.data(), bytes);
  if (bad >= 0) {
    fprintf(stderr, "[parent] byte %ld differs (range [%zu, +%zu) of %zu)\n", bad, offset, length,
            bytes);
  }
  CHECK(bad < 0);
  // 2. The whole allocation, then our word.
  auto mine = pattern(seed, 2, bytes);
  CHECK(s->copyAsync(data->ptr(), mine.data(), bytes) == ncclSuccess);
  CHECK(s->writeValue64(&words[kParentWrote], 1) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  char done = 0;
  CHECK(ferry::unixRecvExact(sock, &done, 1, nullptr, 0, nullptr, kTimeoutMs) == ncclSuccess);
  CHECK(done == 'D');
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
  pid_t pid = fork();  // before any allocation: the child inherits no mapping
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
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  printf("runtime_zc: %s\n", rc == 0 ? "PASSED" : "FAILED");
  return rc;
}
