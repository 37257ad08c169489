#include "topo/peer_info.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/hash.h"

namespace ferry {
namespace {

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

std::string hostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

uint64_t localHostHash() {
  return fnv1a(hostName() + "|" + readFirstLine("/proc/sys/kernel/random/boot_id"));
}

uint64_t localPidHash() {
  // Two containers on one host can reuse a pid; the namespace inode tells them apart.
  struct stat st {};
  uint64_t ns = (stat("/proc/self/ns/pid", &st) == 0) ? static_cast<uint64_t>(st.st_ino) : 0;
  return fnv1a(std::to_string(ns) + ":" + std::to_string(getpid()), localHostHash());
}

uint64_t hostHashFor(const std::string& hostId) {
  // NCCL_HOSTID replaces the machine's identity (NCCL's semantics): ranks
  // that set different values treat each other as other hosts.
  return hostId.empty() ? localHostHash() : fnv1a("NCCL_HOSTID|" + hostId);
}

Status fillLocalPeerInfo(int rank, int device, int runtimeKind, const std::string& busId,
                         const std::string& hostId, PeerInfo* out) {
  PeerInfo info;
  memset(&info, 0, sizeof(info));
  info.version = kPeerInfoVersion;
  info.rank = rank;
  info.device = device;
  info.runtimeKind = runtimeKind;
  info.hostHash = hostHashFor(hostId);
  info.pidHash = localPidHash();
  info.pid = getpid();
  snprintf(info.busId, sizeof(info.busId), "%s", busId.c_str());
  snprintf(info.hostname, sizeof(info.hostname), "%s", hostName().c_str());
  *out = info;
  return ncclSuccess;
}

}  // namespace ferry
