// BootstrapOptions from params, unique ids, root thread lifetime, and a small
// in-process communicator (ranks as threads) over loopback TCP.
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "common/random.h"

namespace ferry::boot {
namespace {

TEST(BootstrapOptions, FromParams) {
  Params p = Params::fromValues({{"FERRY_BOOTSTRAP_TIMEOUT", "7"},
                                 {"NCCL_SOCKET_IFNAME", "=eth0"},
                                 {"NCCL_SOCKET_FAMILY", "AF_INET6"},
                                 {"FERRY_BOOTSTRAP_STAGGER_RANKS", "64"},
                                 {"NCCL_COMM_ID", "10.0.0.1:4444"}});
  BootstrapOptions o = BootstrapOptions::fromParams(p);
  EXPECT_EQ(o.timeoutMs, 7000);
  EXPECT_EQ(o.ifname, "=eth0");
  EXPECT_EQ(o.family, "AF_INET6");
  EXPECT_EQ(o.staggerRanks, 64);
  EXPECT_EQ(o.commId, "10.0.0.1:4444");
  EXPECT_EQ(o.abortFlag, nullptr);
  BootstrapOptions d = BootstrapOptions::fromParams(Params::fromValues({}));
  EXPECT_EQ(d.timeoutMs, 120000);
  EXPECT_EQ(d.staggerRanks, 128);
  EXPECT_TRUE(d.commId.empty());
  // A timeout of 0 would mean waits that never end: the default is kept.
  EXPECT_EQ(BootstrapOptions::fromParams(Params::fromValues({{"FERRY_BOOTSTRAP_TIMEOUT", "0"}}))
                .timeoutMs,
            120000);
}

TEST(BootstrapUniqueId, CommIdModeIsDeterministicAndThreadless) {
  size_t live = liveRootCount();
  BootstrapOptions o;
  o.commId = "127.0.0.1:29500";
  ncclUniqueId a, b;
  memset(&a, 1, sizeof(a));
  memset(&b, 2, sizeof(b));
  ASSERT_EQ(createUniqueId(o, &a), ncclSuccess);
  ASSERT_EQ(createUniqueId(o, &b), ncclSuccess);
  EXPECT_EQ(memcmp(&a, &b, sizeof(a)), 0);
  EXPECT_EQ(liveRootCount(), live);
  UniqueIdInfo info;
  ASSERT_EQ(decodeUniqueId(a, &info), ncclSuccess);
  EXPECT_TRUE(info.commIdMode);
  EXPECT_EQ(info.root.toString(), "127.0.0.1:29500");
  EXPECT_EQ(info.magic, magicFromCommId(o.commId));
  EXPECT_NE(describeUniqueId(a).find("127.0.0.1:29500"), std::string::npos);
  o.commId = "127.0.0.1";  // no port
  EXPECT_NE(createUniqueId(o, &a), ncclSuccess);
  ncclUniqueId junk;
  memset(&junk, 0x33, sizeof(junk));
  EXPECT_EQ(describeUniqueId(junk).rfind("<invalid", 0), 0u);
}

TEST(BootstrapUniqueId, FreshIdsDifferAndRootsExitOnTimeout) {
  BootstrapOptions o;
  o.timeoutMs = 300;
  ncclUniqueId a, b;
  ASSERT_EQ(createUniqueId(o, &a), ncclSuccess);
  ASSERT_EQ(createUniqueId(o, &b), ncclSuccess);
  EXPECT_NE(memcmp(&a, &b, sizeof(a)), 0);
  UniqueIdInfo ia, ib;
  ASSERT_EQ(decodeUniqueId(a, &ia), ncclSuccess);
  ASSERT_EQ(decodeUniqueId(b, &ib), ncclSuccess);
  EXPECT_FALSE(ia.commIdMode);
  EXPECT_NE(ia.magic, ib.magic);
  EXPECT_NE(ia.root.port(), ib.root.port());
  EXPECT_GE(liveRootCount(), 2u);
  // Nobody comes: both roots give up after 300 ms and are joined.
  for (int i = 0; i < 100 && liveRootCount() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    joinFinishedRoots();
  }
  EXPECT_EQ(liveRootCount(), 0u);
}

TEST(BootstrapInProcess, InvalidArguments) {
  BootstrapOptions o;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  std::unique_ptr<Bootstrap> b;
  EXPECT_EQ(Bootstrap::create(id, 0, 1, o, &b), ncclInvalidArgument);  // not an id
  o.commId = "127.0.0.1:1";
  ASSERT_EQ(createUniqueId(o, &id), ncclSuccess);
  EXPECT_EQ(Bootstrap::create(id, 2, 2, o, &b), ncclInvalidArgument);
  EXPECT_EQ(Bootstrap::create(id, -1, 2, o, &b), ncclInvalidArgument);
  EXPECT_EQ(Bootstrap::create(id, 0, 0, o, &b), ncclInvalidArgument);
}

// Ranks as threads of this process: each owns its Bootstrap.
TEST(BootstrapInProcess, ThreadsAllGatherSendRecvBarrier) {
  for (int nranks : {1, 3}) {
    BootstrapOptions o;
    o.timeoutMs = 20000;
    ncclUniqueId id;
    ASSERT_EQ(createUniqueId(o, &id), ncclSuccess);
    uint64_t seed = test::testSeed();
    std::vector<int> failures(nranks, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<Bootstrap> b;
        if (Bootstrap::create(id, r, nranks, o, &b) != ncclSuccess) {
          failures[r] = 1;
          return;
        }
        std::vector<uint64_t> slots(nranks * 3, 0xA5A5A5A5A5A5A5A5ull);
        for (int k = 0; k < 3; ++k) slots[r * 3 + k] = test::Rng(seed, r * 3 + k).next();
        if (b->allGather(slots.data(), 3 * sizeof(uint64_t)) != ncclSuccess) failures[r] |= 2;
        for (int q = 0; q < nranks * 3; ++q) {
          if (slots[q] != test::Rng(seed, q).next()) failures[r] |= 4;
        }
        int succ = (r + 1) % nranks, pred = (r + nranks - 1) % nranks;
        uint64_t out = test::Rng(seed, 100 + r).next(), in = 0;
        if (b->send(succ, kUserTagBase + 1, &out, sizeof(out)) != ncclSuccess) failures[r] |= 8;
        if (b->recv(pred, kUserTagBase + 1, &in, sizeof(in)) != ncclSuccess) failures[r] |= 16;
        if (in != test::Rng(seed, 100 + pred).next()) failures[r] |= 32;
        if (b->barrier() != ncclSuccess) failures[r] |= 64;
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < nranks; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r << " of " << nranks;
  }
}

// ncclCommInitRankScalable's bootstrap: every split of 7 ranks over 1..7
// roots forms the ring (an all-gather of fresh data proves every rank knows
// every other); identical ids count as one; bad id counts fail at once.
TEST(BootstrapInProcess, ScalableRootsFormOneRing) {
  const int nranks = 7;
  BootstrapOptions o;
  o.timeoutMs = 20000;
  for (int nId : {1, 2, 3, 7}) {
    std::vector<ncclUniqueId> ids(nId);
    for (auto& id : ids) ASSERT_EQ(createUniqueId(o, &id), ncclSuccess);
    uint64_t seed = test::testSeed() + nId;
    std::vector<int> failures(nranks, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<Bootstrap> b;
        if (Bootstrap::createScalable(ids.data(), nId, r, nranks, o, &b) != ncclSuccess) {
          failures[r] = 1;
          return;
        }
        std::vector<uint64_t> slots(nranks, 0);
        slots[r] = test::Rng(seed, r).next();
        if (b->allGather(slots.data(), sizeof(uint64_t)) != ncclSuccess) failures[r] |= 2;
        for (int q = 0; q < nranks; ++q) {
          if (slots[q] != test::Rng(seed, q).next()) failures[r] |= 4;
        }
        if (b->barrier() != ncclSuccess) failures[r] |= 8;
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < nranks; ++r)
      EXPECT_EQ(failures[r], 0) << "rank " << r << ", " << nId << " roots";
  }
  joinFinishedRoots();
  std::vector<ncclUniqueId> same(3);
  ASSERT_EQ(createUniqueId(o, &same[0]), ncclSuccess);
  same[1] = same[2] = same[0];
  std::vector<int> failures(3, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> b;
      if (Bootstrap::createScalable(same.data(), 3, r, 3, o, &b) != ncclSuccess) failures[r] = 1;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(failures[r], 0) << "identical ids, rank " << r;
  std::unique_ptr<Bootstrap> b;
  EXPECT_EQ(Bootstrap::createScalable(same.data(), 0, 0, 3, o, &b), ncclInvalidArgument);
  EXPECT_EQ(Bootstrap::createScalable(same.data(), 4, 0, 3, o, &b), ncclInvalidArgument);
  EXPECT_EQ(Bootstrap::createScalable(nullptr, 1, 0, 3, o, &b), ncclInvalidArgument);
}

}  // namespace
}  // namespace ferry::boot
