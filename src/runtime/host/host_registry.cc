#include "runtime/host/host_registry.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

namespace ferry::rt::host {
namespace {

struct LiveAllocation {
  uint64_t id;
  size_t size;
  int fd;  // borrowed from the HostDeviceMemory that owns it
};

// Both tables are leaked singletons: allocations and registrations may be
// released during static destruction.
struct Allocations {
  std::mutex mutex;
  uint64_t nextId = 1;                               // guarded by mutex
  std::map<uintptr_t, LiveAllocation> byBase;        // guarded by mutex
  std::unordered_map<uint64_t, uintptr_t> baseById;  // guarded by mutex
};

Allocations& allocations() {
  static Allocations* instance = new Allocations();
  return *instance;
}

struct Registrations {
  std::mutex mutex;
  std::map<uintptr_t, uintptr_t> pages;  // first page -> end (page-rounded); guarded
};

Registrations& registrations() {
  static Registrations* instance = new Registrations();
  return *instance;
}

uintptr_t pageSize() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// [first, end) of the pages that [ptr, ptr + bytes) touches.
void pageSpan(const void* ptr, size_t bytes, uintptr_t* first, uintptr_t* end) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  *first = p / pageSize() * pageSize();
  *end = (p + bytes + pageSize() - 1) / pageSize() * pageSize();
}

}  // namespace

uint64_t registerAllocation(void* base, size_t size, int fd) {
  Allocations& a = allocations();
  std::lock_guard<std::mutex> lock(a.mutex);
  uint64_t id = a.nextId++;
  auto b = reinterpret_cast<uintptr_t>(base);
  a.byBase[b] = LiveAllocation{id, size, fd};
  a.baseById[id] = b;
  return id;
}

void unregisterAllocation(uint64_t id) {
  Allocations& a = allocations();
  std::lock_guard<std::mutex> lock(a.mutex);
  auto it = a.baseById.find(id);
  if (it == a.baseById.end()) return;
  a.byBase.erase(it->second);
  a.baseById.erase(it);
}

bool findAllocation(const void* ptr, size_t bytes, AllocationRecord* out) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  if (p == 0 || p + bytes < p) return false;
  Allocations& a = allocations();
  std::lock_guard<std::mutex> lock(a.mutex);
  // The allocation starting at or before p, if any, is the only candidate.
  auto it = a.byBase.upper_bound(p);
  if (it == a.byBase.begin()) return false;
  --it;
  uintptr_t base = it->first;
  size_t size = it->second.size;
  if (p >= base + size || p + bytes > base + size) return false;
  *out = AllocationRecord{it->second.id, base, size};
  return true;
}

Status dupAllocationFd(uint64_t id, UniqueFd* out) {
  Allocations& a = allocations();
  // The lock keeps the allocation (and so its fd) alive while we dup it.
  std::lock_guard<std::mutex> lock(a.mutex);
  auto it = a.baseById.find(id);
  if (it == a.baseById.end()) {
    FERRY_FAIL(ncclInvalidArgument, "exportAllocationFd: allocation id %lu is not live",
               static_cast<unsigned long>(id));
  }
  int fd = fcntl(a.byBase.at(it->second).fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) FERRY_FAIL(ncclSystemError, "exportAllocationFd: dup failed: %s", strerror(errno));
  out->reset(fd);
  return ncclSuccess;
}

Status claimHostRange(const void* ptr, size_t bytes) {
  uintptr_t first = 0, end = 0;
  pageSpan(ptr, bytes, &first, &end);
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  // Overlap: the first claim starting at or after `first` begins before
  // `end`, or the last claim before `first` ends after it.
  auto next = r.pages.lower_bound(first);
  bool overlaps = next != r.pages.end() && next->first < end;
  if (!overlaps && next != r.pages.begin()) overlaps = std::prev(next)->second > first;
  if (overlaps) {
    FERRY_FAIL(ncclInvalidUsage,
               "registerHost: [%p, +%zu) shares pages with a range already registered in this "
               "process (register a shared region once, as a whole)",
               ptr, bytes);
  }
  r.pages[first] = end;
  return ncclSuccess;
}

void releaseHostRange(const void* ptr, size_t bytes) {
  uintptr_t first = 0, end = 0;
  pageSpan(ptr, bytes, &first, &end);
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.pages.find(first);
  if (it != r.pages.end() && it->second == end) r.pages.erase(it);
}

}  // namespace ferry::rt::host
