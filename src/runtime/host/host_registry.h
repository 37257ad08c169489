// Process-wide bookkeeping of the host runtime (internal to runtime/host):
// which "device" allocations are alive (for describeAllocation and
// exportAllocationFd) and which host ranges are registered (registerHost).
//
// Process-wide rather than per runtime: addresses are unique in a process
// whichever runtime made them, and ids must never repeat in the process.
// Threading: every function is thread-safe (one mutex each for the two
// tables); none blocks for long.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/fd.h"
#include "core/status.h"

namespace ferry::rt::host {

struct AllocationRecord {
  uint64_t id = 0;
  uintptr_t base = 0;
  size_t size = 0;
};

// Records a live allocation of `size` bytes at `base` whose memfd is `fd`
// (borrowed: the caller keeps it open until unregisterAllocation returns).
// Returns its id: 1, 2, ... from a process-wide counter, never reused.
uint64_t registerAllocation(void* base, size_t size, int fd);
// Forgets allocation `id`; after it returns, no exportAllocationFd uses its fd.
void unregisterAllocation(uint64_t id);
// The live allocation holding all of [ptr, ptr + bytes) (bytes 0: ptr alone).
bool findAllocation(const void* ptr, size_t bytes, AllocationRecord* out);
// A close-on-exec dup of live allocation `id`'s memfd; ncclInvalidArgument
// (WARN) when `id` is not live, ncclSystemError when dup fails.
[[nodiscard]] Status dupAllocationFd(uint64_t id, UniqueFd* out);

// Claims the pages of [ptr, ptr + bytes) for a registration, as
// cudaHostRegister would: ncclInvalidUsage (WARN) when any page is already
// claimed by another live registration.
[[nodiscard]] Status claimHostRange(const void* ptr, size_t bytes);
// Releases a claim made by claimHostRange with the same arguments.
void releaseHostRange(const void* ptr, size_t bytes);

}  // namespace ferry::rt::host
