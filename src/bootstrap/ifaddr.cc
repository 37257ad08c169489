#include "bootstrap/ifaddr.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/log.h"

namespace ferry::boot {

namespace {

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(start, comma - start);
    if (!item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

bool matchInterfaceName(const std::string& spec, const std::string& ifname) {
  if (spec.empty()) return !startsWith(ifname, "lo") && !startsWith(ifname, "docker");
  size_t pos = 0;
  bool exclude = false;
  bool exact = false;
  if (pos < spec.size() && spec[pos] == '^') exclude = true, ++pos;
  if (pos < spec.size() && spec[pos] == '=') exact = true, ++pos;
  bool listed = false;
  for (const std::string& entry : splitList(spec.substr(pos))) {
    if (exact ? ifname == entry : startsWith(ifname, entry)) listed = true;
  }
  return exclude ? !listed : listed;
}

Status parseFamily(const std::string& text, int* family) {
  if (text.empty()) {
    *family = AF_UNSPEC;
  } else if (text == "AF_INET" || text == "inet" || text == "4" || text == "ipv4") {
    *family = AF_INET;
  } else if (text == "AF_INET6" || text == "inet6" || text == "6" || text == "ipv6") {
    *family = AF_INET6;
  } else {
    FERRY_FAIL(ncclInvalidArgument, "NCCL_SOCKET_FAMILY='%s' is not AF_INET or AF_INET6",
               text.c_str());
  }
  return ncclSuccess;
}

Status listInterfaces(std::vector<InterfaceAddress>* out) {
  out->clear();
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) {
    FERRY_FAIL(ncclSystemError, "bootstrap: getifaddrs failed: %s", strerror(errno));
  }
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> list(raw, freeifaddrs);
  for (ifaddrs* it = raw; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || (it->ifa_flags & IFF_UP) == 0) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    InterfaceAddress ia;
    socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (!SocketAddress::fromSockaddr(it->ifa_addr, len, &ia.addr)) continue;
    if (ia.addr.isLinkLocal() && fam == AF_INET6) continue;
    ia.addr.setPort(0);
    ia.name = it->ifa_name ? it->ifa_name : "";
    ia.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0 || ia.addr.isLoopback();
    out->push_back(ia);
  }
  return ncclSuccess;
}

Status chooseInterface(const std::vector<InterfaceAddress>& all, const std::string& spec,
                       int family, InterfaceAddress* out) {
  auto familyOk = [family](const InterfaceAddress& ia) {
    return family == AF_UNSPEC || ia.addr.family() == family;
  };
  for (const InterfaceAddress& ia : all) {
    if (familyOk(ia) && !(ia.addr.family() == AF_INET6 && ia.addr.isLinkLocal()) &&
        matchInterfaceName(spec, ia.name)) {
      *out = ia;
      return ncclSuccess;
    }
  }
  if (spec.empty()) {
    for (const InterfaceAddress& ia : all) {
      if (familyOk(ia) && ia.loopback) {
        *out = ia;
        return ncclSuccess;
      }
    }
  }
  std::string seen;
  for (const InterfaceAddress& ia : all) seen += " " + ia.name + "=" + ia.addr.hostString();
  FERRY_FAIL(ncclSystemError,
             "bootstrap: no interface matches NCCL_SOCKET_IFNAME='%s' family=%s; available:%s",
             spec.c_str(),
             family == AF_INET ? "AF_INET" : (family == AF_INET6 ? "AF_INET6" : "any"),
             seen.empty() ? " (none)" : seen.c_str());
}

Status findInterface(const std::string& spec, int family, InterfaceAddress* out) {
  std::vector<InterfaceAddress> all;
  FERRY_CHECK(listInterfaces(&all));
  FERRY_CHECK(chooseInterface(all, spec, family, out));
  FERRY_INFO(kLogBootstrap, "Bootstrap: using interface %s address %s", out->name.c_str(),
             out->addr.hostString().c_str());
  return ncclSuccess;
}

}  // namespace ferry::boot
