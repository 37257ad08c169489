// NIC choice by PCI locality (topo/pci_locality.h, transport/net_setup.h's
// netDevFor): a GPU uses the NICs behind its own PCIe switch, else its own
// root complex, else all; component-wise comparison; unknown paths spread
// over every NIC as before; netDevFor rotates within the nearest set.
#include <dirent.h>

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/null_net_engine.h"
#include "topo/pci_locality.h"
#include "transport/net_setup.h"

namespace ferry {
namespace {

// A two-socket host: root complexes pci0000:17 and pci0000:80, a PCIe
// switch under each (18:00.0 and 81:00.0).
const std::string kGpu0 = "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0";
const std::string kNicSwitch0 = "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:1c:00.0";
const std::string kNicRoot0 = "/sys/devices/pci0000:17/0000:17:02.0/0000:20:00.0";
const std::string kNicSwitch1 = "/sys/devices/pci0000:80/0000:80:00.0/0000:81:00.0/0000:83:00.0";
const std::string kNicSwitch1b = "/sys/devices/pci0000:80/0000:80:00.0/0000:81:00.0/0000:84:00.0";

TEST(PciLocality, SharedDepthComparesWholeComponents) {
  EXPECT_EQ(sharedPciDepth(kGpu0, kNicSwitch0), 5);  // sys devices pci0000:17 17:00.0 18:00.0
  EXPECT_EQ(sharedPciDepth(kGpu0, kNicRoot0), 3);
  EXPECT_EQ(sharedPciDepth(kGpu0, kNicSwitch1), 2);
  EXPECT_EQ(sharedPciDepth("/sys/devices/pci0000:1/x", "/sys/devices/pci0000:17/x"), 2);
  EXPECT_EQ(sharedPciDepth("", kGpu0), 0);
  EXPECT_EQ(sharedPciDepth(kGpu0, ""), 0);
  EXPECT_EQ(sharedPciDepth(kGpu0 + "/", kGpu0), 6);  // a trailing slash is no component
}

TEST(PciLocality, NearestSwitchThenRootThenAll) {
  // The NIC behind the GPU's own switch wins over its root complex's.
  EXPECT_EQ(nearestNetDevices(kGpu0, {kNicSwitch1, kNicRoot0, kNicSwitch0, kNicSwitch1b}),
            (std::vector<int>{2}));
  // Without one there, the root complex's.
  EXPECT_EQ(nearestNetDevices(kGpu0, {kNicSwitch1, kNicRoot0, kNicSwitch1b}),
            (std::vector<int>{1}));
  // Only the other socket's NICs: equally far, all of them share.
  EXPECT_EQ(nearestNetDevices(kGpu0, {kNicSwitch1, kNicSwitch1b}), (std::vector<int>{0, 1}));
  // A GPU behind the other switch takes both NICs there.
  const std::string gpu1 = "/sys/devices/pci0000:80/0000:80:00.0/0000:81:00.0/0000:82:00.0";
  EXPECT_EQ(nearestNetDevices(gpu1, {kNicSwitch0, kNicSwitch1, kNicRoot0, kNicSwitch1b}),
            (std::vector<int>{1, 3}));
}

TEST(PciLocality, UnknownPathsSpreadOverEveryNic) {
  EXPECT_EQ(nearestNetDevices("", {kNicSwitch0, kNicSwitch1}), (std::vector<int>{0, 1}));
  EXPECT_EQ(nearestNetDevices(kGpu0, {"", "", ""}), (std::vector<int>{0, 1, 2}));
  // A NIC whose path is unknown is farther than one that shares anything.
  EXPECT_EQ(nearestNetDevices(kGpu0, {"", kNicSwitch1}), (std::vector<int>{1}));
  EXPECT_TRUE(nearestNetDevices(kGpu0, {}).empty());
}

TEST(PciLocality, SysfsPathOfBusIds) {
  // The host runtime's device ids and malformed ones have no sysfs path.
  EXPECT_EQ(pciSysfsPath("host:3"), "");
  EXPECT_EQ(pciSysfsPath(""), "");
  EXPECT_EQ(pciSysfsPath("0000-1b-00-0"), "");
  EXPECT_EQ(pciSysfsPath("0000:ff:1f.7"), "");  // well formed, no such function here
}

// An engine whose devices report the given PCI paths.
class PathEngine final : public NullNetEngine {
 public:
  explicit PathEngine(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  const char* name() const override { return "Paths"; }
  Status devices(int* count) override {
    *count = static_cast<int>(paths_.size());
    return ncclSuccess;
  }
  Status properties(int dev, net::NetProperties* out) override {
    out->name = "nic" + std::to_string(dev);
    out->pciPath = paths_[dev];
    return ncclSuccess;
  }

 private:
  std::vector<std::string> paths_;
};

Topology topologyOf(const char* busId, int localRank) {
  Topology t;
  t.myRank = 0;
  t.localRank = localRank;
  t.peers.resize(1);
  snprintf(t.peers[0].busId, sizeof(t.peers[0].busId), "%s", busId);
  return t;
}

TEST(PciLocality, NetDevForSpreadsOverAllWhenPathsSayNothing) {
  // The host runtime's GPU has no sysfs path: channel c of local rank l uses
  // NIC (c + l) % count, as before locality was looked at.
  PathEngine engine({kNicSwitch0, kNicSwitch1, kNicRoot0});
  for (int local = 0; local < 3; ++local) {
    Topology t = topologyOf("host:0", local);
    for (int c = 0; c < 6; ++c) EXPECT_EQ(netDevFor(&engine, t, c), (c + local) % 3);
  }
  PathEngine one({kNicSwitch0});
  EXPECT_EQ(netDevFor(&one, topologyOf("host:0", 1), 5), 0);
}

TEST(PciLocality, NetDevForKeepsToTheNearestNics) {
  // Any PCI function of this machine stands in for the GPU; the NICs are
  // made-up paths beside it (behind its parent) and far from it.
  std::string busId;
  if (DIR* d = opendir("/sys/bus/pci/devices")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') busId = e->d_name;
    }
    closedir(d);
  }
  const std::string gpu = pciSysfsPath(busId);
  if (gpu.empty()) GTEST_SKIP() << "no PCI function in sysfs here";
  EXPECT_EQ(pciSysfsPath("0000" + busId), gpu);  // an 8-digit domain is cut to 4
  const std::string parent = gpu.substr(0, gpu.rfind('/'));
  PathEngine engine({"/sys/devices/pci9999:99/far0", parent + "/nearA",
                     "/sys/devices/pci9999:99/far1", parent + "/nearB"});
  for (int local = 0; local < 2; ++local) {
    Topology t = topologyOf(busId.c_str(), local);
    for (int c = 0; c < 4; ++c) {
      // Near devices 1 and 3, rotated by channel and local rank.
      EXPECT_EQ(netDevFor(&engine, t, c), (c + local) % 2 == 0 ? 1 : 3) << c << " " << local;
    }
  }
}

}  // namespace
}  // namespace ferry
