#include "enqueue/peer_memory.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "transport/shared_memory.h"

namespace ferry {
namespace {

class IpcPeerMapping final : public PeerMapping {
 public:
  explicit IpcPeerMapping(std::unique_ptr<rt::IpcMapping> m) : m_(std::move(m)) {}
  char* base() const override { return static_cast<char*>(m_->ptr()); }
  uint64_t size() const override { return m_->size(); }

 private:
  std::unique_ptr<rt::IpcMapping> m_;
};

class SharedPeerMapping final : public PeerMapping {
 public:
  SharedPeerMapping(std::unique_ptr<SharedRegion> r, std::unique_ptr<rt::HostRegistration> reg)
      : region_(std::move(r)), reg_(std::move(reg)) {}
  ~SharedPeerMapping() override { reg_.reset(); }  // unregister before unmapping
  char* base() const override { return static_cast<char*>(reg_->devicePtr()); }
  uint64_t size() const override { return region_->size(); }

 private:
  std::unique_ptr<SharedRegion> region_;
  std::unique_ptr<rt::HostRegistration> reg_;
};

// (peer process, kind, id, communicator: Resource keys only).
using Key = std::tuple<std::string, uint32_t, uint64_t, uint64_t>;

struct Entry {
  std::shared_ptr<PeerMapping> mapping;
  uint8_t handle[64] = {0};  // CUDA legacy handle bytes (stale detection)
  uint64_t order = 0;        // insertion order (oldest dropped first)
};

struct Table {
  std::mutex mu;
  std::map<Key, Entry> entries;  // guarded by mu
  uint64_t inserted = 0;         // guarded by mu
};

Table& table() {
  static Table* t = new Table();  // used until exit
  return *t;
}

constexpr size_t kMaxEntries = 4096;

Key keyOf(const PeerRef& peer, const PostInfo& info) {
  const bool resource = info.kind == static_cast<uint32_t>(PostKind::Resource);
  return Key{peer.proxyName, info.kind, info.allocId, resource ? peer.commKey : 0};
}

bool isLegacy(const PostInfo& info) {
  return info.kind == static_cast<uint32_t>(PostKind::Ipc) &&
         info.ipcType == static_cast<uint32_t>(rt::IpcDescriptor::Type::CudaLegacy);
}

// Closes the mapping of a freed allocation whose legacy handle the peer's
// driver gave to a new one: CUDA refuses to open one handle twice.
void dropStale(Table& t, const PeerRef& peer, const PostInfo& info) {
  for (auto it = t.entries.begin(); it != t.entries.end(); ++it) {
    if (std::get<0>(it->first) != peer.proxyName || std::get<1>(it->first) != info.kind ||
        memcmp(it->second.handle, info.ipc, sizeof(info.ipc)) != 0) {
      continue;
    }
    std::weak_ptr<PeerMapping> old = it->second.mapping;
    FERRY_INFO(kLogP2p, "peer %d: closing the stale mapping of freed allocation %llu", peer.rank,
               static_cast<unsigned long long>(std::get<2>(it->first)));
    t.entries.erase(it);
    // A copy still holding it would be a copy into freed memory; wait briefly.
    for (int i = 0; i < 5000 && !old.expired(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return;
  }
}

Status importMapping(rt::Runtime* runtime, const PeerRef& peer, const PostInfo& info,
                     std::shared_ptr<PeerMapping>* out) {
  if (info.kind == static_cast<uint32_t>(PostKind::Resource)) {
    UniqueFd fd;
    uint64_t size = 0;
    FERRY_CHECK(peer.rpc->fetch(RpcKind::Resource, peer.commKey, info.allocId, peer.timeoutMs,
                                peer.abortFlag, &fd, &size));
    std::unique_ptr<SharedRegion> region;
    FERRY_CHECK(SharedRegion::attach(std::move(fd), info.allocSize, &region));
    std::unique_ptr<rt::HostRegistration> reg;
    FERRY_CHECK(runtime->registerHost(region->data(), region->size(), &reg));
    *out = std::make_shared<SharedPeerMapping>(std::move(region), std::move(reg));
    return ncclSuccess;
  }
  if (info.kind != static_cast<uint32_t>(PostKind::Ipc)) {
    FERRY_FAIL(ncclInternalError, "peer %d posted bytes of unknown kind %u", peer.rank, info.kind);
  }
  rt::IpcDescriptor desc;
  desc.type = static_cast<rt::IpcDescriptor::Type>(info.ipcType);
  desc.size = info.allocSize;
  desc.offset = 0;
  memcpy(desc.bytes, info.ipc, sizeof(desc.bytes));
  if (desc.type == rt::IpcDescriptor::Type::HostMemfd) {
    UniqueFd fd;
    uint64_t size = 0;
    FERRY_CHECK(peer.rpc->fetch(RpcKind::Allocation, info.allocId, 0, peer.timeoutMs,
                                peer.abortFlag, &fd, &size));
    desc.fd = fd.release();
  }
  std::unique_ptr<rt::IpcMapping> m;
  FERRY_CHECK(runtime->importIpc(desc, &m));
  *out = std::make_shared<IpcPeerMapping>(std::move(m));
  FERRY_INFO(kLogP2p, "peer %d: mapped allocation %llu (%llu bytes) for direct copies", peer.rank,
             static_cast<unsigned long long>(info.allocId),
             static_cast<unsigned long long>(info.allocSize));
  return ncclSuccess;
}

// Drops the oldest entries nobody else holds, once the table is large
// (memfd allocations are never reused, so their entries only accumulate).
void trim(Table& t) {
  if (t.entries.size() <= kMaxEntries) return;
  std::multimap<uint64_t, Key> byAge;
  for (const auto& [k, e] : t.entries) {
    if (e.mapping.use_count() == 1) byAge.emplace(e.order, k);
  }
  for (const auto& [order, k] : byAge) {
    if (t.entries.size() <= kMaxEntries * 3 / 4) break;
    t.entries.erase(k);
  }
}

}  // namespace

PeerMemory& PeerMemory::instance() {
  static PeerMemory* p = new PeerMemory();  // used until exit
  return *p;
}

Status PeerMemory::map(rt::Runtime* runtime, const PeerRef& peer, const PostInfo& info,
                       std::shared_ptr<PeerMapping>* out) {
  Table& t = table();
  const Key key = keyOf(peer, info);
  // Held across the import: two threads must not open one handle twice.
  std::lock_guard<std::mutex> lock(t.mu);
  std::shared_ptr<PeerMapping> m;
  auto it = t.entries.find(key);
  if (it != t.entries.end()) {
    m = it->second.mapping;
  } else {
    if (isLegacy(info)) dropStale(t, peer, info);
    Entry e;
    FERRY_CHECK(importMapping(runtime, peer, info, &e.mapping));
    memcpy(e.handle, info.ipc, sizeof(e.handle));
    e.order = t.inserted++;
    m = e.mapping;
    t.entries.emplace(key, std::move(e));
    trim(t);
  }
  if (info.offset + info.bytes > m->size()) {
    FERRY_FAIL(ncclInternalError, "peer %d: bytes [%llu, +%llu) exceed its block of %llu bytes",
               peer.rank, static_cast<unsigned long long>(info.offset),
               static_cast<unsigned long long>(info.bytes),
               static_cast<unsigned long long>(m->size()));
  }
  *out = std::move(m);
  return ncclSuccess;
}

void PeerMemory::forgetCommunicator(uint64_t commKey) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto it = t.entries.begin(); it != t.entries.end();) {
    if (std::get<3>(it->first) == commKey && commKey != 0) {
      it = t.entries.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ferry
