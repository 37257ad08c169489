#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "topo/topology.h"

namespace ferry {
namespace {

PeerInfo peer(int rank, uint64_t host, uint64_t pid, const char* bus) {
  PeerInfo p;
  memset(&p, 0, sizeof(p));
  p.version = kPeerInfoVersion;
  p.rank = rank;
  p.hostHash = host;
  p.pidHash = pid;
  p.pid = static_cast<int64_t>(pid);
  snprintf(p.busId, sizeof(p.busId), "%s", bus);
  snprintf(p.hostname, sizeof(p.hostname), "h%llu", static_cast<unsigned long long>(host));
  return p;
}

TEST(Topology, ClassifiesEveryPeer) {
  // rank 0,1 share a process; 2 is another process on host 1; 3 is on host 2.
  std::vector<PeerInfo> peers = {peer(0, 1, 10, "a"), peer(1, 1, 10, "b"), peer(2, 1, 11, "c"),
                                 peer(3, 2, 20, "a")};
  Topology t;
  ASSERT_EQ(buildTopology(peers, 0, &t), ncclSuccess);
  EXPECT_EQ(t.links[0], PeerLink::Self);
  EXPECT_EQ(t.links[1], PeerLink::SameProcess);
  EXPECT_EQ(t.links[2], PeerLink::SameHost);
  EXPECT_EQ(t.links[3], PeerLink::OtherHost);
  EXPECT_EQ(t.nHosts, 2);
  EXPECT_EQ(t.localRank, 0);
  EXPECT_EQ(t.localRanks, 3);
  EXPECT_EQ(t.localProcesses, 2);  // ranks 0 and 1 share one
  Topology t3;
  ASSERT_EQ(buildTopology(peers, 3, &t3), ncclSuccess);
  EXPECT_EQ(t3.links[0], PeerLink::OtherHost);
  EXPECT_EQ(t3.localRank, 0);
  EXPECT_EQ(t3.localRanks, 1);
  EXPECT_EQ(t3.localProcesses, 1);
}

TEST(Topology, RingGroupsHosts) {
  std::vector<PeerInfo> peers = {peer(0, 1, 10, "a"), peer(1, 2, 20, "a"), peer(2, 1, 11, "b"),
                                 peer(3, 2, 21, "b")};
  Topology t;
  ASSERT_EQ(buildTopology(peers, 1, &t), ncclSuccess);
  EXPECT_EQ(t.ringOrder, (std::vector<int>{0, 2, 1, 3}));
}

TEST(Topology, DuplicateDeviceOnOneHostRejected) {
  std::vector<PeerInfo> peers = {peer(0, 1, 10, "0000:1b:00.0"), peer(1, 1, 11, "0000:1b:00.0")};
  Topology t;
  EXPECT_EQ(buildTopology(peers, 0, &t), ncclInvalidUsage);
  // The same bus id on two different hosts is fine.
  peers[1].hostHash = 2;
  EXPECT_EQ(buildTopology(peers, 0, &t), ncclSuccess);
}

TEST(Topology, MixedRuntimesRejected) {
  std::vector<PeerInfo> peers = {peer(0, 1, 10, "a"), peer(1, 1, 11, "b")};
  peers[1].runtimeKind = 1;
  Topology t;
  EXPECT_EQ(buildTopology(peers, 0, &t), ncclInvalidUsage);
}

TEST(Topology, CorruptTableRejected) {
  std::vector<PeerInfo> peers = {peer(0, 1, 10, "a"), peer(1, 1, 11, "b")};
  Topology t;
  peers[1].rank = 0;
  EXPECT_EQ(buildTopology(peers, 0, &t), ncclInternalError);
  peers[1].rank = 1;
  peers[1].version = 99;
  EXPECT_EQ(buildTopology(peers, 0, &t), ncclInternalError);
  peers[1].version = kPeerInfoVersion;
  EXPECT_EQ(buildTopology(peers, 5, &t), ncclInternalError);
}

TEST(Topology, LocalInfoIsStable) {
  EXPECT_EQ(localHostHash(), localHostHash());
  EXPECT_NE(localPidHash(), localHostHash());
  PeerInfo p;
  ASSERT_EQ(fillLocalPeerInfo(3, 1, 0, "host:1", "", &p), ncclSuccess);
  EXPECT_EQ(p.rank, 3);
  EXPECT_STREQ(p.busId, "host:1");
  EXPECT_EQ(p.hostHash, localHostHash());
}

// NCCL_HOSTID: equal values are one host, different values different hosts,
// and none of them is the machine's own identity.
TEST(Topology, HostIdOverridesTheMachineIdentity) {
  PeerInfo a, b, c;
  ASSERT_EQ(fillLocalPeerInfo(0, 0, 0, "host:0", "node-a", &a), ncclSuccess);
  ASSERT_EQ(fillLocalPeerInfo(1, 1, 0, "host:1", "node-a", &b), ncclSuccess);
  ASSERT_EQ(fillLocalPeerInfo(2, 0, 0, "host:0", "node-b", &c), ncclSuccess);
  EXPECT_EQ(a.hostHash, b.hostHash);
  EXPECT_NE(a.hostHash, c.hostHash);
  EXPECT_NE(a.hostHash, localHostHash());
  EXPECT_EQ(hostHashFor(""), localHostHash());
}

}  // namespace
}  // namespace ferry
