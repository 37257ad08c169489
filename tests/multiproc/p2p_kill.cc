// A peer process killed in the middle of a transfer: the survivor's stream
// must be released and the communicator must report an error, promptly and
// without hanging. One process under ferry-run forks its peer itself (the
// launcher would otherwise stop the run when the peer dies). With the
// argument "net" the two processes are on different emulated hosts
// (NCCL_HOSTID), so the transfer goes through the network engine and the
// survivor learns of the death from its connection. The child dies only
// once the parent has posted its receive (a pipe says so): a death noticed
// earlier fails the whole communicator (comm/liveness.h), first receive
// included.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry.h"
#include "mp_check.h"
#include "nccl.h"

using namespace ferry::test;

namespace {

constexpr size_t kBytes = size_t{256} << 20;

// The child: joins, starts its half of the exchange, then dies abruptly.
[[noreturn]] void child(const ncclUniqueId& id, bool net, int goFd) {
  if (net) setenv("NCCL_HOSTID", "ferry-kill-host-b", 1);
  ncclComm_t comm = nullptr;
  if (ncclFerrySetDevice(1) != ncclSuccess) _exit(3);  // one device per rank
  if (ncclCommInitRank(&comm, 2, id, 1) != ncclSuccess) _exit(3);
  std::vector<char> buf(kBytes, 7);
  (void)ncclSend(buf.data(), 1 << 20, ncclInt8, 0, comm, nullptr);  // one small message lands
  cudaStream_t s = nullptr;
  (void)ncclFerryStreamCreate(&s);
  (void)ncclSend(buf.data(), kBytes, ncclInt8, 0, comm, s);  // this one is cut short
  char go = 0;
  if (read(goFd, &go, 1) != 1) _exit(5);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  raise(SIGKILL);
  _exit(4);
}

}  // namespace

int main(int argc, char** argv) {
  const bool net = argc > 1 && strcmp(argv[1], "net") == 0;
  unsetenv("NCCL_COMM_ID");
  if (net) setenv("NCCL_HOSTID", "ferry-kill-host-a", 1);
  setenv("FERRY_RUNTIME", "host", 1);
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  int go[2];
  if (pipe(go) != 0) return 2;
  pid_t pid = fork();
  if (pid == 0) child(id, net, go[0]);
  ncclComm_t comm = nullptr;
  EXPECT_OK(ncclFerrySetDevice(0));
  EXPECT_OK(ncclCommInitRank(&comm, 2, id, 0));
  std::vector<char> small(1 << 20, 0), big(kBytes, 0);
  EXPECT_OK(ncclRecv(small.data(), small.size(), ncclInt8, 1, comm, nullptr));
  EXPECT_TRUE(small[0] == 7 && small.back() == 7, "first message arrived intact");
  cudaStream_t stream = nullptr;
  EXPECT_OK(ncclFerryStreamCreate(&stream));
  auto start = Clock::now();
  EXPECT_OK(ncclRecv(big.data(), big.size(), ncclInt8, 1, comm, stream));
  EXPECT_TRUE(write(go[1], "g", 1) == 1, "pipe to the child");
  // Slow the receiver down so the peer dies while data is in flight.
  EXPECT_OK(ncclFerryStreamSynchronize(stream));
  double s = secondsSince(start);
  // The receive may also have completed: its bytes can be copied out of the
  // peer's memory even after the peer died (trap 55: released after 0.68 s
  // with no error yet, on a loaded 2-core machine). Either way the death
  // must be reported, by the transfer or by the liveness check, within
  // seconds.
  ncclResult_t state = ncclSuccess;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  do {
    EXPECT_OK(ncclCommGetAsyncError(comm, &state));
    if (state != ncclSuccess) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (Clock::now() < deadline);
  const double reported = secondsSince(start);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("peer killed (signal %d); receive released after %.3f s; async error after %.3f s: %s\n",
         WIFSIGNALED(status) ? WTERMSIG(status) : 0, s, reported, ncclGetErrorString(state));
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "peer did not die as planned");
  EXPECT_TRUE(state == ncclRemoteError, "async error %d", state);
  EXPECT_TRUE(s < 30.0 && reported < 30.0, "took %.1f s (reported after %.1f s)", s, reported);
  // New work on a failed communicator is refused, not hung.
  EXPECT_RESULT(ncclSend(small.data(), 16, ncclInt8, 1, comm, stream), ncclRemoteError);
  EXPECT_OK(ncclCommAbort(comm));
  EXPECT_OK(ncclFerryStreamDestroy(stream));
  printf("%s kill: %d failure(s)\n", gFailures == 0 ? "PASS" : "FAIL", gFailures.load());
  return gFailures == 0 ? 0 : 1;
}
