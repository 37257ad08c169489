// Network interface discovery for the bootstrap (NCCL_SOCKET_IFNAME and
// NCCL_SOCKET_FAMILY semantics).
//
// NCCL_SOCKET_IFNAME syntax (matchInterfaceName):
//   "eth,ib"     interfaces whose name starts with any listed prefix
//   "^docker,lo" every interface except those starting with a listed prefix
//   "=eth0,ib1"  exactly these names
//   "^=eth0"     every interface except exactly these names
//   ""           default rule: anything but "lo*" and "docker*"; when that
//                finds nothing, chooseInterface falls back to loopback.
// Empty list entries are ignored. IPv6 link-local addresses (fe80::/10) are
// skipped because they need a scope that other hosts cannot use.
//
// Threading: pure functions, except listInterfaces (reads the kernel's list).
#pragma once

#include <string>
#include <vector>

#include "bootstrap/socket.h"
#include "core/status.h"

namespace ferry::boot {

struct InterfaceAddress {
  std::string name;
  SocketAddress addr;  // port 0
  bool loopback = false;
};

// NCCL_SOCKET_IFNAME matching of one interface name.
bool matchInterfaceName(const std::string& spec, const std::string& ifname);

// "" -> AF_UNSPEC, "AF_INET"/"inet"/"4" -> AF_INET, "AF_INET6"/"inet6"/"6"
// -> AF_INET6; anything else is ncclInvalidArgument.
[[nodiscard]] Status parseFamily(const std::string& text, int* family);

// Every UP, non-link-local IPv4/IPv6 address, in the kernel's order.
[[nodiscard]] Status listInterfaces(std::vector<InterfaceAddress>* out);

// Pure selection over `all`: the first address whose interface matches
// `spec` and whose family matches `family` (AF_UNSPEC = any). With an empty
// spec and no match, the first loopback address of that family is taken.
// ncclSystemError with a WARN listing what exists when nothing matches.
[[nodiscard]] Status chooseInterface(const std::vector<InterfaceAddress>& all,
                                     const std::string& spec, int family, InterfaceAddress* out);

// listInterfaces + chooseInterface, with an INFO line naming the choice.
[[nodiscard]] Status findInterface(const std::string& spec, int family, InterfaceAddress* out);

}  // namespace ferry::boot
