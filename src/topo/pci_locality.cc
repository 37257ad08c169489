#include "topo/pci_locality.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace ferry {
namespace {

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

int sharedPciDepth(const std::string& a, const std::string& b) {
  const std::vector<std::string> x = components(a);
  const std::vector<std::string> y = components(b);
  int depth = 0;
  while (static_cast<size_t>(depth) < x.size() && static_cast<size_t>(depth) < y.size() &&
         x[depth] == y[depth]) {
    ++depth;
  }
  return depth;
}

std::vector<int> nearestNetDevices(const std::string& gpuPath,
                                   const std::vector<std::string>& nicPaths) {
  std::vector<int> depth(nicPaths.size(), 0);
  int best = 0;
  for (size_t i = 0; i < nicPaths.size(); ++i) {
    depth[i] = gpuPath.empty() ? 0 : sharedPciDepth(gpuPath, nicPaths[i]);
    best = std::max(best, depth[i]);
  }
  std::vector<int> out;
  for (size_t i = 0; i < nicPaths.size(); ++i) {
    if (depth[i] == best) out.push_back(static_cast<int>(i));
  }
  return out;
}

std::string pciSysfsPath(const std::string& busId) {
  // sysfs names a function dddd:bb:dd.f (12 characters, lower case).
  constexpr size_t kSysfsIdLen = 12;
  if (busId.size() < kSysfsIdLen) return "";
  std::string id = busId.substr(busId.size() - kSysfsIdLen);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (id[4] != ':' || id[7] != ':' || id[10] != '.') return "";
  // A function's place in the tree does not change while the process runs,
  // and every network connection of every communicator asks: resolved once.
  static std::mutex mu;
  static auto* known = new std::map<std::string, std::string>();  // leaked: used at exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = known->find(id);
  if (it != known->end()) return it->second;
  const std::string link = "/sys/bus/pci/devices/" + id;
  std::unique_ptr<char, decltype(&free)> real(realpath(link.c_str(), nullptr), free);
  return (*known)[id] = real ? std::string(real.get()) : std::string();
}

}  // namespace ferry
