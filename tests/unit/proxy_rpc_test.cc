// The proxy's local RPC must hand out exactly the registered descriptors and
// survive hostile clients (garbage, wrong magic, truncated requests, unknown
// keys) without crashing or stalling the real clients.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "common/random.h"
#include "core/unix_socket.h"
#include "proxy/rpc.h"
#include "transport/shared_memory.h"

namespace ferry {
namespace {

// Serves in a background thread until stopped, like the proxy loop does.
class Served {
 public:
  Served() {
    EXPECT_EQ(RpcServer::create(nullptr, &server_), ncclSuccess);
    thread_ = std::thread([this]() {
      while (!stop_.load()) {
        server_->serve();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  ~Served() {
    stop_.store(true);
    thread_.join();
  }
  RpcServer& server() { return *server_; }

 private:
  std::unique_ptr<RpcServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ProxyRpc, HandsOutTheRegisteredRegion) {
  Served s;
  std::unique_ptr<SharedRegion> region;
  ASSERT_EQ(SharedRegion::create(3 * 4096, "rpc-test", &region), ncclSuccess);
  test::Rng rng(test::testSeed(), 301);
  auto* words = static_cast<uint64_t*>(region->data());
  for (size_t i = 0; i < region->size() / 8; ++i) words[i] = rng.next();
  ASSERT_EQ(s.server().addResource(7, 9, region->fd(), region->size()), ncclSuccess);

  std::unique_ptr<RpcClient> client;
  ASSERT_EQ(RpcClient::connect(s.server().name(), 2000, nullptr, &client), ncclSuccess);
  UniqueFd fd;
  uint64_t size = 0;
  ASSERT_EQ(client->fetch(RpcKind::Resource, 7, 9, 2000, nullptr, &fd, &size), ncclSuccess);
  EXPECT_EQ(size, region->size());
  std::unique_ptr<SharedRegion> mapped;
  ASSERT_EQ(SharedRegion::attach(std::move(fd), size, &mapped), ncclSuccess);
  EXPECT_EQ(memcmp(mapped->data(), region->data(), size), 0);
  // The same pages: a write through one mapping shows through the other.
  static_cast<uint64_t*>(mapped->data())[5] = ~words[5];
  EXPECT_EQ(words[5], static_cast<uint64_t*>(mapped->data())[5]);

  // Unknown keys and withdrawn resources are refused, not hung on.
  UniqueFd none;
  EXPECT_EQ(client->fetch(RpcKind::Resource, 7, 10, 2000, nullptr, &none, &size),
            ncclInvalidArgument);
  s.server().removeResource(7, 9);
  EXPECT_EQ(client->fetch(RpcKind::Resource, 7, 9, 2000, nullptr, &none, &size),
            ncclInvalidArgument);
  // Allocation requests need a host runtime; this server has none.
  EXPECT_NE(client->fetch(RpcKind::Allocation, 1, 0, 2000, nullptr, &none, &size), ncclSuccess);
}

// Resources made on request (kernel p2p's connections on first use): a
// provider runs on the serving thread when a key is missing, may add it,
// and the same request gets it; a blob travels without an fd; a provider
// that ignores a key leaves the request refused; a removed one is not asked.
TEST(ProxyRpc, ProvidersMakeMissingResourcesWithBlobs) {
  Served s;
  test::Rng rng(test::testSeed(), 303);
  std::vector<uint8_t> blob(1 + rng.below(RpcServer::kMaxBlob));
  for (auto& b : blob) b = static_cast<uint8_t>(rng.next());
  std::atomic<int> calls{0};
  const uint64_t id = s.server().addProvider(42, [&](uint64_t b) {
    calls.fetch_add(1);
    if (b == 5)
      EXPECT_EQ(s.server().addResource(42, 5, -1, 77, blob.data(), blob.size()), ncclSuccess);
  });
  std::unique_ptr<RpcClient> client;
  ASSERT_EQ(RpcClient::connect(s.server().name(), 2000, nullptr, &client), ncclSuccess);
  UniqueFd fd;
  uint64_t size = 0;
  std::vector<uint8_t> got;
  ASSERT_EQ(client->fetch(RpcKind::Resource, 42, 5, 2000, nullptr, &fd, &size, &got), ncclSuccess);
  EXPECT_FALSE(fd);
  EXPECT_EQ(size, 77u);
  EXPECT_EQ(got, blob);
  EXPECT_EQ(calls.load(), 1);
  // Made once: the second request finds it without asking.
  ASSERT_EQ(client->fetch(RpcKind::Resource, 42, 5, 2000, nullptr, &fd, &size, &got), ncclSuccess);
  EXPECT_EQ(calls.load(), 1);
  // A blob-only reply is an error for a caller that wants a descriptor.
  EXPECT_NE(client->fetch(RpcKind::Resource, 42, 5, 2000, nullptr, &fd, &size), ncclSuccess);
  // Keys the provider does not make, and other keyA's providers, are refused.
  EXPECT_EQ(client->fetch(RpcKind::Resource, 42, 6, 2000, nullptr, &fd, &size, &got),
            ncclInvalidArgument);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(client->fetch(RpcKind::Resource, 43, 5, 2000, nullptr, &fd, &size, &got),
            ncclInvalidArgument);
  EXPECT_EQ(calls.load(), 2);
  s.server().removeProvider(id);
  s.server().removeResource(42, 5);
  EXPECT_EQ(client->fetch(RpcKind::Resource, 42, 5, 2000, nullptr, &fd, &size, &got),
            ncclInvalidArgument);
  EXPECT_EQ(calls.load(), 2);
  // A resource needs an fd or a blob, and a blob fits the reply.
  EXPECT_NE(s.server().addResource(1, 1, -1, 0), ncclSuccess);
  std::vector<uint8_t> big(RpcServer::kMaxBlob + 1);
  EXPECT_NE(s.server().addResource(1, 1, -1, 0, big.data(), big.size()), ncclSuccess);
}

TEST(ProxyRpc, HostileClientsAreDroppedAndOthersServed) {
  Served s;
  std::unique_ptr<SharedRegion> region;
  ASSERT_EQ(SharedRegion::create(4096, "rpc-test", &region), ncclSuccess);
  ASSERT_EQ(s.server().addResource(1, 2, region->fd(), region->size()), ncclSuccess);
  test::Rng rng(test::testSeed(), 302);
  // Garbage of random lengths, a request with a wrong magic, a truncated one,
  // and a client that connects and says nothing.
  std::vector<UniqueFd> strangers;
  for (int k = 0; k < 4; ++k) {
    UniqueFd c;
    ASSERT_EQ(unixConnect(s.server().name(), &c, 2000), ncclSuccess);
    std::vector<uint8_t> junk(1 + rng.below(200));
    for (auto& b : junk) b = static_cast<uint8_t>(rng.next());
    if (k == 1 && junk.size() >= 8) memset(junk.data(), 0, 8);  // wrong magic
    if (k < 3) {
      size_t n = k == 2 ? 5 : junk.size();  // k == 2: a truncated request
      ASSERT_EQ(unixSendMsg(c.get(), junk.data(), n, nullptr, 0, 1000), ncclSuccess);
    }
    strangers.push_back(std::move(c));
  }
  std::unique_ptr<RpcClient> client;
  ASSERT_EQ(RpcClient::connect(s.server().name(), 2000, nullptr, &client), ncclSuccess);
  UniqueFd fd;
  uint64_t size = 0;
  EXPECT_EQ(client->fetch(RpcKind::Resource, 1, 2, 2000, nullptr, &fd, &size), ncclSuccess);
  EXPECT_EQ(size, region->size());
  // The strangers that sent something were disconnected.
  for (int k = 0; k < 3; ++k) {
    char b = 0;
    ssize_t n = -1;
    for (int t = 0; t < 100 && n < 0; ++t) {
      n = recv(strangers[k].get(), &b, 1, MSG_DONTWAIT);
      if (n < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(n, 0) << "stranger " << k << " was not disconnected";
  }
}

}  // namespace
}  // namespace ferry
