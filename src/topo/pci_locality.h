// Which network devices (NICs) a GPU's connections use, by PCI locality, as
// NCCL places each GPU on its nearest NIC: the NICs whose sysfs path shares
// the most components with the GPU's (behind the same PCIe switch, else the
// same root complex, else anywhere). Equally near NICs share the GPU's
// channels and peers; paths nobody knows (the host runtime, loopback, a
// plugin that reports none) make every NIC equally near, which is the
// spread over all of them that Ferry used before it looked.
#pragma once

#include <string>
#include <vector>

namespace ferry {

// How many leading components two sysfs paths share, compared component by
// component ("/sys/devices/pci0000:1" is not a prefix of ".../pci0000:17");
// 0 when either is empty.
int sharedPciDepth(const std::string& a, const std::string& b);

// The indices of the NICs nearest to the GPU at gpuPath (ascending). Every
// index when gpuPath is empty or no NIC shares more with it than another.
std::vector<int> nearestNetDevices(const std::string& gpuPath,
                                   const std::vector<std::string>& nicPaths);

// The canonical sysfs path of the PCI function busId ("0000:1B:00.0"; a
// longer domain is cut to sysfs's four digits); "" when there is none (the
// host runtime's "host:N", a machine without sysfs).
std::string pciSysfsPath(const std::string& busId);

}  // namespace ferry
