// Unix-domain socket helpers: messages with descriptors, abstract names,
// timeouts, abort, and rejection of messages that do not fit.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/proc.h"
#include "common/random.h"
#include "core/unix_socket.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<uint8_t> randomBytes(size_t n, test::Rng& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng.next());
  return v;
}

TEST(UnixSocket, PassesBytesAndDescriptors) {
  test::Rng rng(test::testSeed(), 101);
  UniqueFd a, b;
  ASSERT_EQ(unixSocketPair(&a, &b), ncclSuccess);

  // A memfd with random content and a pipe: both must arrive usable.
  UniqueFd mem(memfd_create("ferry-test", MFD_CLOEXEC));
  ASSERT_TRUE(mem.valid());
  auto content = randomBytes(4096 + rng.below(4096), rng);
  ASSERT_EQ(write(mem.get(), content.data(), content.size()), static_cast<ssize_t>(content.size()));
  int pipeFds[2];
  ASSERT_EQ(pipe2(pipeFds, O_CLOEXEC), 0);
  UniqueFd pipeRead(pipeFds[0]), pipeWrite(pipeFds[1]);

  auto message = randomBytes(1 + rng.below(2000), rng);
  int toSend[] = {mem.get(), pipeWrite.get()};
  ASSERT_EQ(unixSendMsg(a.get(), message.data(), message.size(), toSend, 2, 1000), ncclSuccess);

  std::vector<uint8_t> got(4096, 0xA5);
  size_t received = 0;
  UniqueFd fds[kUnixMaxFds];
  int numFds = -1;
  ASSERT_EQ(
      unixRecvMsg(b.get(), got.data(), got.size(), &received, fds, kUnixMaxFds, &numFds, 1000),
      ncclSuccess);
  ASSERT_EQ(received, message.size());
  EXPECT_EQ(memcmp(got.data(), message.data(), received), 0);
  ASSERT_EQ(numFds, 2);
  EXPECT_NE(fds[0].get(), mem.get());  // our own copies, not the sender's numbers
  std::vector<uint8_t> readBack(content.size(), 0xA5);
  ASSERT_EQ(pread(fds[0].get(), readBack.data(), readBack.size(), 0),
            static_cast<ssize_t>(readBack.size()));
  EXPECT_EQ(readBack, content);
  uint64_t token = rng.next(), tokenBack = 0;
  ASSERT_EQ(write(fds[1].get(), &token, sizeof(token)), 8);
  ASSERT_EQ(read(pipeRead.get(), &tokenBack, sizeof(tokenBack)), 8);
  EXPECT_EQ(token, tokenBack);
  EXPECT_EQ(fcntl(fds[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST(UnixSocket, AbstractListenConnectAccept) {
  test::Rng rng(test::testSeed(), 102);
  std::string name = "ferry-test-" + std::to_string(getpid()) + "-" + std::to_string(rng.next());
  auto payload = randomBytes(1 + rng.below(60000), rng);
  // Connect first, listen later: connect retries until someone listens.
  std::thread client([&] {
    UniqueFd c;
    ASSERT_EQ(unixConnect(name, &c, 5000), ncclSuccess);
    ASSERT_EQ(unixSendMsg(c.get(), payload.data(), payload.size(), nullptr, 0, 5000), ncclSuccess);
    uint8_t ack = 0;
    ASSERT_EQ(unixRecvExact(c.get(), &ack, 1, nullptr, 0, nullptr, 5000), ncclSuccess);
    EXPECT_EQ(ack, 0x5A);
  });
  std::this_thread::sleep_for(30ms);
  UniqueFd listener, conn;
  ASSERT_EQ(unixListen(name, &listener), ncclSuccess);
  UniqueFd second;
  EXPECT_EQ(unixListen(name, &second), ncclSystemError);  // name taken
  ASSERT_EQ(unixAccept(listener.get(), &conn, 5000), ncclSuccess);
  std::vector<uint8_t> got(payload.size());
  ASSERT_EQ(unixRecvExact(conn.get(), got.data(), got.size(), nullptr, 0, nullptr, 5000),
            ncclSuccess);
  EXPECT_EQ(got, payload);
  uint8_t ack = 0x5A;
  ASSERT_EQ(unixSendMsg(conn.get(), &ack, 1, nullptr, 0, 5000), ncclSuccess);
  client.join();
}

TEST(UnixSocket, TimeoutFires) {
  UniqueFd a, b;
  ASSERT_EQ(unixSocketPair(&a, &b), ncclSuccess);
  char buf[16];
  size_t got = 0;
  auto start = Clock::now();
  EXPECT_EQ(unixRecvMsg(b.get(), buf, sizeof(buf), &got, nullptr, 0, nullptr, 150),
            ncclSystemError);
  auto took = Clock::now() - start;
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 2s);
  UniqueFd listener;
  std::string name = "ferry-test-idle-" + std::to_string(getpid());
  ASSERT_EQ(unixListen(name, &listener), ncclSuccess);
  UniqueFd conn;
  EXPECT_EQ(unixAccept(listener.get(), &conn, 50), ncclSystemError);
  EXPECT_EQ(unixConnect(name + "-nobody", &conn, 50), ncclSystemError);
}

TEST(UnixSocket, AbortFlagInterrupts) {
  UniqueFd a, b;
  ASSERT_EQ(unixSocketPair(&a, &b), ncclSuccess);
  std::atomic<bool> abortFlag{false};
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    abortFlag.store(true, std::memory_order_release);
  });
  char buf[16];
  size_t got = 0;
  auto start = Clock::now();
  EXPECT_EQ(unixRecvMsg(b.get(), buf, sizeof(buf), &got, nullptr, 0, nullptr, 60000, &abortFlag),
            ncclSystemError);
  EXPECT_LT(Clock::now() - start, 2s);
  aborter.join();
  // An already-set flag stops a call before it waits at all.
  UniqueFd conn;
  EXPECT_EQ(unixConnect("ferry-test-nobody", &conn, 60000, &abortFlag), ncclSystemError);
}

TEST(UnixSocket, TruncatedOrOversizedMessagesRejected) {
  test::Rng rng(test::testSeed(), 103);
  UniqueFd a, b;
  ASSERT_EQ(unixSocketPair(&a, &b), ncclSuccess);
  int fdsBefore = test::countOpenFds();

  // Larger than the receive buffer: an error, not a silent cut.
  auto big = randomBytes(100 + rng.below(100), rng);
  ASSERT_EQ(unixSendMsg(a.get(), big.data(), big.size(), nullptr, 0, 1000), ncclSuccess);
  std::vector<uint8_t> small(50);
  size_t got = 0;
  EXPECT_EQ(unixRecvMsg(b.get(), small.data(), small.size(), &got, nullptr, 0, nullptr, 1000),
            ncclRemoteError);

  // Exact-size receive of a shorter message.
  ASSERT_EQ(unixSendMsg(a.get(), big.data(), 10, nullptr, 0, 1000), ncclSuccess);
  EXPECT_EQ(unixRecvExact(b.get(), small.data(), 20, nullptr, 0, nullptr, 1000), ncclRemoteError);

  // More descriptors than accepted: rejected, and every one of them closed.
  UniqueFd extra1(memfd_create("ferry-x", MFD_CLOEXEC)), extra2(memfd_create("ferry-y", 0));
  int two[] = {extra1.get(), extra2.get()};
  ASSERT_EQ(unixSendMsg(a.get(), big.data(), 8, two, 2, 1000), ncclSuccess);
  UniqueFd one[1];
  int n = 0;
  EXPECT_EQ(unixRecvMsg(b.get(), small.data(), small.size(), &got, one, 1, &n, 1000),
            ncclRemoteError);
  EXPECT_EQ(n, 0);
  EXPECT_FALSE(one[0].valid());
  extra1.reset();
  extra2.reset();
  EXPECT_EQ(test::countOpenFds(), fdsBefore);

  // The stream is still in sync afterwards: a good message arrives intact.
  auto good = randomBytes(1 + rng.below(40), rng);
  ASSERT_EQ(unixSendMsg(a.get(), good.data(), good.size(), nullptr, 0, 1000), ncclSuccess);
  ASSERT_EQ(unixRecvMsg(b.get(), small.data(), small.size(), &got, nullptr, 0, nullptr, 1000),
            ncclSuccess);
  ASSERT_EQ(got, good.size());
  EXPECT_EQ(memcmp(small.data(), good.data(), got), 0);

  // Bad arguments and a closed peer.
  EXPECT_EQ(unixSendMsg(a.get(), big.data(), 0, nullptr, 0, 1000), ncclInvalidArgument);
  a.reset();
  EXPECT_EQ(unixRecvMsg(b.get(), small.data(), small.size(), &got, nullptr, 0, nullptr, 1000),
            ncclRemoteError);
  EXPECT_EQ(unixSendMsg(b.get(), good.data(), good.size(), nullptr, 0, 1000), ncclRemoteError);
}

}  // namespace
}  // namespace ferry
