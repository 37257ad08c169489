// Zero-copy on real GPUs across two processes, as the SM-free path uses it:
// the parent (device 0) describes a range inside a cudaMalloc allocation
// (describeAllocation) and sends the whole-allocation descriptor as bytes;
// the child (device 1) maps it (importIpc), adds the offset itself and writes
// random data there, then raises a word in a memfd control block that both
// processes registered (registerHost) with writeValue64; the parent's stream
// waits for it with waitValue64Spin and checks the allocation (the range has
// the child's data, everything else is still poison). Then the parent writes
// the whole allocation and releases the child's spin wait the same way.
//
// Exit 0 = pass, 77 = skipped (fewer than two GPUs, or no CUDA in the build).
// With --loading-mode it only prints "lazy=1" or "lazy=0" (what
// Runtime::lazyModuleLoading says), for runtime_cuda_zc_test.
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

constexpr int kSkip = 77;
constexpr int64_t kTimeoutMs = 60000;
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

struct Wire {
  uint64_t seed;
  AllocationInfo info;  // the legacy handle is in info.ipc.bytes; no fd
  uint64_t offset;
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

long firstMismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) return static_cast<long>(i);
  }
  return -1;
}

uint64_t loadAcquire(uint64_t* w) {
  return std::atomic_ref<uint64_t>(*w).load(std::memory_order_acquire);
}

// Polls a control word from the CPU, bounded.
bool pollWord(uint64_t* w, uint64_t value) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  while (loadAcquire(w) < value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

// Both processes decide independently (no CUDA before fork).
bool haveTwoGpus(Runtime** rt) {
  int count = 0;
  return cudaBuilt() && getRuntime(RuntimeKind::Cuda, rt) == ncclSuccess &&
         (*rt)->deviceCount(&count) == ncclSuccess && count >= 2;
}

// The control block: one memfd page, mapped (inherited fd) and registered by
// each process on its own.
struct Control {
  void* base = MAP_FAILED;
  std::unique_ptr<HostRegistration> reg;
  ~Control() {
    reg.reset();  // unregister before unmapping
    if (base != MAP_FAILED) munmap(base, kCtrlBytes);
  }
  bool open(Runtime* rt, int fd) {
    base = mmap(nullptr, kCtrlBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return base != MAP_FAILED && rt->registerHost(base, kCtrlBytes, &reg) == ncclSuccess;
  }
  uint64_t* dev() const { return static_cast<uint64_t*>(reg->devicePtr()); }
  uint64_t* host() const { return static_cast<uint64_t*>(reg->hostPtr()); }
};

int runChild(int sock, int ctrlFd) {
  const char* role = "child";
  Runtime* rt = nullptr;
  if (!haveTwoGpus(&rt)) return kSkip;
  CHECK(rt->setDevice(1) == ncclSuccess);
  CHECK(rt->preloadKernels() == ncclSuccess);
  Control ctrl;
  CHECK(ctrl.open(rt, ctrlFd));
  Wire wire{};
  CHECK(ferry::unixRecvExact(sock, &wire, sizeof(wire), nullptr, 0, nullptr, kTimeoutMs) ==
        ncclSuccess);
  CHECK(wire.info.mappable && wire.info.ipc.offset == 0);
  IpcDescriptor desc = wire.info.ipc;
  desc.fd = -1;
  std::unique_ptr<IpcMapping> whole;
  CHECK(rt->importIpc(desc, &whole) == ncclSuccess);
  CHECK(whole->size() == wire.info.size);
  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  auto mine = pattern(wire.seed, 1, wire.length);
  auto* range = static_cast<char*>(whole->ptr()) + wire.offset;
  CHECK(s->copyAsync(range, mine.data(), wire.length) == ncclSuccess);
  CHECK(s->writeValue64(&ctrl.dev()[kChildWrote], 1) == ncclSuccess);
  std::vector<uint8_t> got(wire.info.size, 0);
  CHECK(s->waitValue64Spin(&ctrl.dev()[kParentWrote], 1) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), whole->ptr(), wire.info.size) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  long bad = firstMismatch(got, pattern(wire.seed, 2, wire.info.size));
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

int runParent(int sock, int ctrlFd, pid_t child, uint64_t seed) {
  const char* role = "parent";
  Runtime* rt = nullptr;
  if (!haveTwoGpus(&rt)) {
    waitChild(child);
    return kSkip;
  }
  CHECK(rt->setDevice(0) == ncclSuccess);
  CHECK(rt->preloadKernels() == ncclSuccess);
  Control ctrl;
  CHECK(ctrl.open(rt, ctrlFd));
  ferry::test::Rng rng(seed, 0);
  size_t bytes = (2u << 20) * (1 + rng.below(16));  // mappable: whole 2 MiB chunks
  std::unique_ptr<DeviceMemory> mem;
  CHECK(rt->allocDevice(bytes, &mem) == ncclSuccess);
  std::unique_ptr<Stream> s;
  CHECK(rt->createStream(&s) == ncclSuccess);
  std::vector<uint8_t> poison(bytes, kPoison);
  CHECK(s->copyAsync(mem->ptr(), poison.data(), bytes) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  size_t offset = 1 + rng.below(bytes / 2);
  size_t length = 1 + rng.below(bytes - offset - 1);
  Wire wire{};
  wire.seed = seed;
  wire.offset = offset;
  wire.length = length;
  CHECK(rt->describeAllocation(static_cast<char*>(mem->ptr()) + offset, length, &wire.info) ==
        ncclSuccess);
  CHECK(wire.info.mappable && wire.info.base == reinterpret_cast<uint64_t>(mem->ptr()));
  CHECK(wire.info.size >= bytes && wire.info.ipc.type == IpcDescriptor::Type::CudaLegacy);
  CHECK(ferry::unixSendMsg(sock, &wire, sizeof(wire), nullptr, 0, kTimeoutMs) == ncclSuccess);

  std::vector<uint8_t> got(bytes, 0);
  CHECK(s->waitValue64Spin(&ctrl.dev()[kChildWrote], 1) == ncclSuccess);
  CHECK(s->copyAsync(got.data(), mem->ptr(), bytes) == ncclSuccess);
  // The CPU sees the word too; if the child never writes it, release our
  // own wait (as an abort would) so nothing hangs, and fail.
  if (!pollWord(&ctrl.host()[kChildWrote], 1)) {
    std::atomic_ref<uint64_t>(ctrl.host()[kChildWrote]).store(1, std::memory_order_release);
    (void)s->synchronize();
    fprintf(stderr, "[parent] the child never raised its word\n");
    return 1;
  }
  CHECK(s->synchronize() == ncclSuccess);
  std::vector<uint8_t> want(bytes, kPoison);
  auto childData = pattern(seed, 1, length);
  memcpy(want.data() + offset, childData.data(), length);
  long bad = firstMismatch(got, want);
  if (bad >= 0) {
    fprintf(stderr, "[parent] byte %ld differs (range [%zu, +%zu) of %zu)\n", bad, offset, length,
            bytes);
  }
  CHECK(bad < 0);
  auto mine = pattern(seed, 2, wire.info.size);
  CHECK(s->copyAsync(mem->ptr(), mine.data(), bytes) == ncclSuccess);
  if (wire.info.size > bytes) {  // the allocation's tail past what we asked for
    CHECK(s->copyAsync(static_cast<char*>(mem->ptr()) + bytes, mine.data() + bytes,
                       wire.info.size - bytes) == ncclSuccess);
  }
  CHECK(s->writeValue64(&ctrl.dev()[kParentWrote], 1) == ncclSuccess);
  CHECK(s->synchronize() == ncclSuccess);
  char done = 0;
  CHECK(ferry::unixRecvExact(sock, &done, 1, nullptr, 0, nullptr, kTimeoutMs) == ncclSuccess);
  CHECK(done == 'D');
  CHECK(waitChild(child) == 0);
  return 0;
}

int printLoadingMode() {
  Runtime* rt = nullptr;
  if (!cudaBuilt() || getRuntime(RuntimeKind::Cuda, &rt) != ncclSuccess) return kSkip;
  printf("lazy=%d\n", rt->lazyModuleLoading() ? 1 : 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--loading-mode") == 0) return printLoadingMode();
  uint64_t seed = ferry::test::testSeed();
  UniqueFd parentEnd, childEnd;
  if (ferry::unixSocketPair(&parentEnd, &childEnd) != ncclSuccess) return 1;
  // The control block exists before fork; each side maps and registers it.
  UniqueFd ctrlFd(memfd_create("ferry-zc-ctrl", MFD_CLOEXEC));
  if (!ctrlFd || ftruncate(ctrlFd.get(), kCtrlBytes) != 0) {
    perror("memfd");
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();  // before any CUDA call: CUDA does not survive fork
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    parentEnd.reset();
    _exit(runChild(childEnd.get(), ctrlFd.get()));
  }
  childEnd.reset();
  int rc = runParent(parentEnd.get(), ctrlFd.get(), pid, seed);
  if (rc != 0 && rc != kSkip) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  printf("runtime_cuda_zc_ipc: %s\n", rc == 0 ? "PASSED" : rc == kSkip ? "SKIPPED" : "FAILED");
  return rc;
}
