// A communicator's network staging blocks, shared by its connections
// (transport/net_block_pool.h, NetBuffers::take): which block a message
// gets, when a block is pinned, and which blocks stay out of reach (busy,
// or held by a connection that failed), on the host runtime and an engine
// that counts registrations per comm.
#include <map>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/null_net_engine.h"
#include "runtime/host/host_runtime.h"
#include "transport/net_buffers.h"

namespace ferry {
namespace {

class CountingEngine final : public NullNetEngine {
 public:
  std::map<const void*, int> live;  // registrations per comm, not yet deregistered
  Status regMr(void* comm, void*, size_t, int, void** mhandle) override {
    ++live[comm];
    *mhandle = comm;  // a handle that says whose it is
    return ncclSuccess;
  }
  Status deregMr(void* comm, void* mhandle) override {
    EXPECT_EQ(comm, mhandle) << "a handle deregistered on a comm that did not make it";
    --live[comm];
    return ncclSuccess;
  }
};

// One connection of the communicator: one link whose comm is `token`.
struct Conn {
  Conn(rt::Runtime* runtime, CountingEngine* engine, NetBlockPool* pool, bool isSend)
      : link(engine, 0, isSend) {
    link.comm = &token;
    buffers = std::make_unique<NetBuffers>(runtime, std::vector<NetLink*>{&link}, isSend, pool);
    EXPECT_EQ(buffers->init(), ncclSuccess);
  }
  // Declared before the buffers: they deregister on it when they go.
  int token = 0;
  NetLink link;
  std::unique_ptr<NetBuffers> buffers;
  uint64_t seq = 0;

  char* take(uint64_t bytes, void** mhandle = nullptr) {
    char* data = nullptr;
    NetMhandles mh{};
    uint64_t size = 0, reuseAfter = 0;
    NetBuffers::SendWait wait;  // no waits: a block is taken or pinned at once
    EXPECT_EQ(buffers->take(bytes, seq++, wait, &data, &mh, &size, &reuseAfter), ncclSuccess);
    EXPECT_GE(size, bytes);
    EXPECT_EQ(mh[0], &token) << "the block's registration is not this connection's";
    if (mhandle != nullptr) *mhandle = mh[0];
    return data;
  }
  // Every message taken so far is done with its block.
  void finish() {
    NetWords& w = buffers->words();
    w.sent.store(seq);
    w.drained.store(seq);
  }
};

class NetBlockPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rt::HostRuntimeOptions o;
    o.deviceCount = 1;
    runtime_ = rt::makeHostRuntime(o);
    pool_ = std::make_unique<NetBlockPool>(runtime_.get());
  }
  std::unique_ptr<Conn> conn(bool isSend) {
    return std::make_unique<Conn>(runtime_.get(), &engine_, pool_.get(), isSend);
  }

  std::unique_ptr<rt::Runtime> runtime_;
  CountingEngine engine_;
  std::unique_ptr<NetBlockPool> pool_;
};

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST_F(NetBlockPoolTest, AFreeBlockServesAnotherConnectionInEitherDirection) {
  auto a = conn(true), b = conn(false), c = conn(true);
  char* x = a->take(3 * kMiB + 100);
  a->finish();
  EXPECT_EQ(b->take(3 * kMiB), x);  // a send's block, now a receive's
  b->finish();
  EXPECT_EQ(c->take(2 * kMiB + 1), x);  // and another peer's send
  EXPECT_EQ(pool_->blocks().size(), 1u);
  // Pinned once, counted once: by the connection that pinned it.
  EXPECT_EQ(a->buffers->stagingBytes(), NetBuffers::blockSizeFor(3 * kMiB + 100));
  EXPECT_EQ(b->buffers->stagingBytes() + c->buffers->stagingBytes(), 0u);
  EXPECT_EQ(pool_->bytes(), a->buffers->stagingBytes());
  // Each connection registered it on its own link.
  EXPECT_EQ(engine_.live[&a->token], 1);
  EXPECT_EQ(engine_.live[&b->token], 1);
  EXPECT_EQ(engine_.live[&c->token], 1);
}

TEST_F(NetBlockPoolTest, ABusyBlockIsNotLent) {
  auto a = conn(true), b = conn(true);
  char* x = a->take(3 * kMiB);
  char* y = b->take(3 * kMiB);  // a's message has not left yet
  EXPECT_NE(x, y);
  EXPECT_EQ(pool_->blocks().size(), 2u);
  a->finish();
  EXPECT_EQ(b->take(3 * kMiB), x);  // b's own block is still busy; a's is free now
  EXPECT_EQ(pool_->blocks().size(), 2u);
}

TEST_F(NetBlockPoolTest, TheSmallestFreeBlockThatFits) {
  auto a = conn(true), b = conn(false);
  char* big = a->take(6 * kMiB);          // an 8 MiB block
  char* small = a->take(1 * kMiB + 500);  // a 2 MiB one
  a->finish();
  EXPECT_EQ(b->take(1 * kMiB + 700), small);
  EXPECT_EQ(b->take(3 * kMiB), big);  // the small one is busy, and too small anyway
  auto c = conn(true);
  char* third = c->take(1 * kMiB);  // both busy (b's): pins
  EXPECT_NE(third, small);
  EXPECT_NE(third, big);
  EXPECT_EQ(pool_->blocks().size(), 3u);
}

TEST_F(NetBlockPoolTest, AmongEqualBlocksTheOneRegisteredAlready) {
  auto a = conn(true), b = conn(false), c = conn(true);
  char* x = a->take(3 * kMiB);
  char* y = a->take(3 * kMiB);
  a->finish();
  EXPECT_EQ(c->take(3 * kMiB), x);  // x busy for c
  EXPECT_EQ(b->take(3 * kMiB), y);  // b registers y
  b->finish();
  c->finish();
  // x comes first in the pool, but b registered y already.
  EXPECT_EQ(b->take(3 * kMiB), y);
  EXPECT_EQ(engine_.live[&b->token], 1);
}

TEST_F(NetBlockPoolTest, AFailedConnectionKeepsItsBlocks) {
  auto a = conn(true), b = conn(false), c = conn(true);
  char* x = a->take(3 * kMiB);
  char* y = b->take(3 * kMiB);
  // a failed: its words are released, so its block reads as sent while the
  // engine may still hold it; b's receive failed after its copy drained.
  a->buffers->words().sent.store(kReleased);
  b->buffers->words().arrived.store(kReleased);
  b->buffers->words().drained.store(1);
  char* z = c->take(3 * kMiB);
  EXPECT_NE(z, x);
  EXPECT_NE(z, y);
  EXPECT_EQ(pool_->blocks().size(), 3u);
}

TEST_F(NetBlockPoolTest, AClosingConnectionDeregistersAndFreesItsBlocks) {
  auto a = conn(true), b = conn(true);
  char* x = a->take(3 * kMiB);  // busy: a's message never completes
  const void* token = &a->token;
  EXPECT_EQ(engine_.live[token], 1);
  a.reset();  // the communicator closes it (nothing in flight any more)
  EXPECT_EQ(engine_.live[token], 0) << "the closed connection's registration was kept";
  EXPECT_EQ(b->take(3 * kMiB), x);
  EXPECT_EQ(pool_->blocks().size(), 1u);
}

}  // namespace
}  // namespace ferry
