// The proxy's network progress for point-to-point messages
// (proxy/net_progress.h) against a fake engine whose comms complete
// requests at once unless stalled: links of a striped connection post and
// complete on their own (one stalled link holds up only its own chunks,
// also across messages), while the counters the streams wait on (`arrived`,
// `sent`) advance in chunk order only.
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "common/null_net_engine.h"
#include "proxy/net_progress.h"
#include "runtime/host/host_runtime.h"
#include "transport/net_buffers.h"

namespace ferry {
namespace {

constexpr uint64_t kChunk = 4096;

// Requests complete at the first test unless their comm is stalled; a
// receive reports the bytes a correct sender would have sent (a full chunk,
// or what the receive had room for when that is less: the last chunk).
class FakeEngine final : public NullNetEngine {
 public:
  std::set<void*> stalled;
  std::map<void*, int> posts;  // requests posted per comm

  const char* name() const override { return "Fake"; }
  Status regMr(void*, void*, size_t, int, void** mhandle) override {
    *mhandle = this;
    return ncclSuccess;
  }
  Status deregMr(void*, void*) override { return ncclSuccess; }
  Status isend(void* comm, void*, size_t size, int, void*, void** request) override {
    return post(comm, size, request);
  }
  Status irecv(void* comm, int n, void**, size_t* sizes, int*, void**, void** request) override {
    EXPECT_EQ(n, 1);
    const size_t size = sizes[0] == kChunk + kNetTrailerBytes ? kChunk : sizes[0];
    return post(comm, size, request);
  }
  Status test(void* request, int* done, size_t* sizes) override {
    Request& r = *static_cast<Request*>(request);
    // A comm completes its requests in order, as real engines do.
    std::deque<Request*>& q = queues_[r.comm];
    EXPECT_FALSE(q.empty());
    EXPECT_EQ(q.front(), &r) << "a request tested before an older one of its comm completed";
    *done = stalled.count(r.comm) == 0 && !q.empty() && q.front() == &r;
    if (*done) {
      *sizes = r.size;
      q.pop_front();
    }
    return ncclSuccess;
  }

 private:
  struct Request {
    void* comm = nullptr;
    size_t size = 0;
  };
  Status post(void* comm, size_t size, void** request) {
    requests_.push_back(std::make_unique<Request>(Request{comm, size}));
    queues_[comm].push_back(requests_.back().get());
    ++posts[comm];
    *request = requests_.back().get();
    return ncclSuccess;
  }
  std::vector<std::unique_ptr<Request>> requests_;
  std::map<void*, std::deque<Request*>> queues_;
};

class NetProgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rt::HostRuntimeOptions o;
    o.deviceCount = 1;
    runtime_ = rt::makeHostRuntime(o);
    pool_ = std::make_unique<NetBlockPool>(runtime_.get());
  }

  // A connection with `links` links on the fake engine; comm tokens are the
  // addresses of commTokens_[l].
  void makeConnection(bool isSend, int links) {
    conn_.isSend = isSend;
    conn_.peer = 1;
    conn_.transport = TransportId::Net;
    std::vector<NetLink*> raw;
    for (int l = 0; l < links; ++l) {
      conn_.net.push_back(std::make_unique<NetLink>(&engine_, 0, isSend));
      conn_.net.back()->comm = &commTokens_[l];
      raw.push_back(conn_.net.back().get());
    }
    conn_.netBuffers = std::make_unique<NetBuffers>(runtime_.get(), raw, isSend, pool_.get());
    ASSERT_EQ(conn_.netBuffers->init(), ncclSuccess);
  }

  // Message `seq` of `bytes`, its chunks numbered from `firstChunk`, with a
  // block of its own that holds the trailer a correct sender appends.
  NetOp message(uint64_t seq, uint64_t bytes, uint64_t firstChunk) {
    blocks_.emplace_back(bytes + kNetTrailerBytes);
    const uint64_t trailer = bytes ^ kNetTrailerMagic;
    memcpy(blocks_.back().data() + bytes, &trailer, sizeof(trailer));
    NetOp op;
    op.conn = &conn_;
    op.seq = seq;
    op.data = blocks_.back().data();
    op.blockBytes = bytes + kNetTrailerBytes;
    op.bytes = bytes;
    op.chunkBytes = kChunk;
    op.firstChunk = firstChunk;
    return op;
  }

  void run(NetProgress& p, int passes) {
    for (int i = 0; i < passes; ++i) p.step(0);
  }

  int posts(int link) { return engine_.posts[&commTokens_[link]]; }
  NetWords& words() { return conn_.netBuffers->words(); }

  std::unique_ptr<rt::Runtime> runtime_;
  std::unique_ptr<NetBlockPool> pool_;  // outlives conn_
  FakeEngine engine_;
  char commTokens_[4] = {};
  ConnectionBase conn_;
  std::deque<std::vector<char>> blocks_;
};

TEST_F(NetProgressTest, StalledLinkHoldsUpOnlyItsOwnChunks) {
  makeConnection(/*isSend=*/true, 2);
  words().filled.store(1000);  // every chunk staged
  std::vector<uint64_t> finished;
  NetProgress p([&](const NetOp& op) { finished.push_back(op.seq); });
  engine_.stalled.insert(&commTokens_[0]);
  // Two messages of 40 chunks: link 1 carries the odd ones, 40 in all.
  p.add(message(0, 40 * kChunk, 0));
  p.add(message(1, 40 * kChunk, 40));
  run(p, 50);
  EXPECT_EQ(posts(1), 40) << "link 1 stopped behind the stalled link 0";
  EXPECT_EQ(posts(0), 8) << "link 0's window is 8 pending requests";
  EXPECT_EQ(words().sent.load(), 0u) << "a message counted sent before its stalled chunk 0";
  EXPECT_TRUE(finished.empty());

  engine_.stalled.clear();
  run(p, 50);
  EXPECT_EQ(posts(0), 40);
  EXPECT_EQ(words().sent.load(), 2u);
  EXPECT_EQ(finished, (std::vector<uint64_t>{0, 1}));
  EXPECT_TRUE(p.empty());
}

TEST_F(NetProgressTest, ArrivalsAdvanceInChunkOrderOnly) {
  makeConnection(/*isSend=*/false, 3);
  std::vector<uint64_t> finished;
  NetProgress p([&](const NetOp& op) { finished.push_back(op.seq); });
  engine_.stalled.insert(&commTokens_[1]);
  // 20 chunks and a half: the last is short and carries the trailer.
  const uint64_t bytes = 20 * kChunk + kChunk / 2;
  p.add(message(0, bytes, 0));
  run(p, 50);
  // Chunk 0 (link 0) landed; chunk 1 is link 1's, stalled.
  EXPECT_EQ(words().arrived.load(), 1u);
  EXPECT_EQ(posts(0), 7);  // chunks 0, 3, ..., 18
  EXPECT_EQ(posts(2), 7);  // chunks 2, 5, ..., 20
  EXPECT_TRUE(finished.empty());

  engine_.stalled.clear();
  run(p, 50);
  EXPECT_EQ(words().arrived.load(), 21u);
  EXPECT_EQ(finished, (std::vector<uint64_t>{0}));
  EXPECT_TRUE(p.empty());
}

TEST_F(NetProgressTest, ALaterMessageStartsWhereTheLastEnded) {
  // The connection's state goes when it is idle; the next message's chunks
  // must still land on the links the peer uses for them (chunk k on k % L).
  makeConnection(/*isSend=*/true, 3);
  words().filled.store(1000);
  NetProgress p([](const NetOp&) {});
  p.add(message(0, 4 * kChunk, 0));  // chunks 0..3: links 0, 1, 2, 0
  run(p, 10);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(posts(0), 2);
  engine_.stalled.insert(&commTokens_[0]);
  p.add(message(1, 2 * kChunk, 4));  // chunks 4, 5: links 1, 2
  run(p, 10);
  EXPECT_EQ(posts(0), 2);
  EXPECT_EQ(posts(1), 2);
  EXPECT_EQ(posts(2), 2);
  EXPECT_EQ(words().sent.load(), 2u);
  EXPECT_TRUE(p.empty());
}

TEST_F(NetProgressTest, StatsChargeEachLinksTimeToWhatStoppedIt) {
  // A send: chunks 0..3 staged only at t = 1000 ns, then posted at once
  // (each with the chunks staged from it on: 4, 3, 2, 1), then nothing to
  // post until the message retires at t = 3000 ns.
  makeConnection(/*isSend=*/true, 1);
  NetProgress p([](const NetOp&) {});
  p.add(message(0, 4 * kChunk, 0));
  p.step(0);
  EXPECT_EQ(posts(0), 0);
  words().filled.store(4);
  p.step(1000);
  EXPECT_EQ(posts(0), 4);
  p.step(3000);
  EXPECT_TRUE(p.empty());
  const NetStats& s = conn_.netStats;
  EXPECT_EQ(s.stopNs[static_cast<size_t>(NetStop::Unstaged)].load(), 1000u);
  EXPECT_EQ(s.stopNs[static_cast<size_t>(NetStop::NoMessage)].load(), 2000u);
  EXPECT_EQ(s.stopNs[static_cast<size_t>(NetStop::Window)].load(), 0u);
  EXPECT_EQ(s.posts.load(), 4u);
  EXPECT_EQ(s.aheadSum.load(), 10u);
  EXPECT_EQ(s.aheadMax.load(), 4u);
  EXPECT_EQ(describeNetStats(s, true),
            " net links: no message 0.0 ms, not staged 0.0 ms; 4 chunks posted, staged ahead "
            "avg 2.5 max 4; 1 messages, avg us: first chunk out 1.0, wire 2.0, gap after the "
            "previous 0.0");
}

TEST_F(NetProgressTest, StatsFollowEachMessagesTimeline) {
  // Message 0, taken at t = 0, staged at 1000 ns, done at 3000; message 1,
  // taken at 2000, staged only at 7000 (its stream waited for message 0's
  // turnaround), done at 8000 and sent in one chunk.
  makeConnection(/*isSend=*/true, 1);
  NetProgress p([](const NetOp&) {});
  p.add(message(0, 2 * kChunk, 0));
  p.step(0);
  words().filled.store(2);
  p.step(1000);
  p.step(3000);
  EXPECT_TRUE(p.empty());
  NetOp second = message(1, kChunk, 2);
  second.postedNs = 2000;
  p.add(second);
  p.step(4000);
  EXPECT_EQ(posts(0), 2) << "message 1 waits for its staging";
  words().filled.store(3);
  p.step(7000);
  p.step(8000);
  EXPECT_TRUE(p.empty());
  const NetStats& s = conn_.netStats;
  EXPECT_EQ(s.messages.load(), 2u);
  EXPECT_EQ(s.firstOutNs.load(), 1000u + 5000u);  // taken to first chunk posted
  EXPECT_EQ(s.wireNs.load(), 2000u + 1000u);      // first chunk posted to done
  EXPECT_EQ(s.gapNs.load(), 4000u);               // message 0's end to message 1's start
  const std::string text = describeNetStats(s, true);
  EXPECT_NE(text.find("2 messages, avg us: first chunk out 3.0, wire 1.5, gap after the "
                      "previous 4.0"),
            std::string::npos)
      << text;
}

TEST_F(NetProgressTest, StatsTellABusyBlockFromAFullWindow) {
  // A receive whose block is still being drained (reuseAfter 1, drained 0)
  // until t = 500 ns, then 20 chunks behind a stalled link: 8 posted, the
  // window full until the link moves again at t = 5000 ns.
  makeConnection(/*isSend=*/false, 1);
  NetProgress p([](const NetOp&) {});
  NetOp op = message(0, 20 * kChunk, 0);
  op.reuseAfter = 1;
  p.add(op);
  engine_.stalled.insert(&commTokens_[0]);
  p.step(0);
  EXPECT_EQ(posts(0), 0);
  words().drained.store(1);
  p.step(500);
  EXPECT_EQ(posts(0), 8);
  p.step(2000);
  engine_.stalled.clear();
  for (int64_t t = 5000; !p.empty(); t += 1000) p.step(t);
  const NetStats& s = conn_.netStats;
  EXPECT_EQ(s.stopNs[static_cast<size_t>(NetStop::BlockBusy)].load(), 500u);
  EXPECT_GE(s.stopNs[static_cast<size_t>(NetStop::Window)].load(), 4500u);
  EXPECT_EQ(s.stopNs[static_cast<size_t>(NetStop::Unstaged)].load(), 0u);
  EXPECT_EQ(s.posts.load(), 20u);
  EXPECT_EQ(s.aheadSum.load(), 0u) << "receives have no staging lead";
  const std::string text = describeNetStats(s, false);
  EXPECT_NE(text.find("block busy 0.0 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("window full"), std::string::npos) << text;
  EXPECT_EQ(text.find("staged ahead"), std::string::npos) << text;
}

TEST(NetStats, NothingPostedSaysNothing) {
  NetStats s;
  EXPECT_EQ(describeNetStats(s, true), "");
}

}  // namespace
}  // namespace ferry
