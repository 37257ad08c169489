// What each rank tells the others about itself at init (all-gathered through
// the bootstrap). Fixed-size and trivially copyable: it travels as raw bytes
// between processes built from the same Ferry version (kPeerInfoVersion is
// checked on receipt so a mismatched build fails clearly instead of misreading).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/agreed_knobs.h"
#include "core/status.h"

namespace ferry {

constexpr uint32_t kPeerInfoVersion = 2;

struct PeerInfo {
  uint32_t version;
  int32_t rank;
  int32_t device;       // runtime device index in that process
  int32_t runtimeKind;  // rt::RuntimeKind
  uint64_t hostHash;    // hostname + boot id: equal <=> same machine
  uint64_t pidHash;     // host + pid namespace + pid: equal <=> same process
  int64_t pid;
  char busId[32];  // NUL-terminated device identifier ("0000:1b:00.0", "host:3")
  char hostname[64];
  // ncclConfig_t.maxCTAs: the communicator uses the smallest of all ranks'
  // (every rank must run the same collective channels).
  int32_t maxCtas;
  int32_t reserved;
  AgreedKnobs knobs;  // must match on every rank (core/agreed_knobs.h)
};
static_assert(std::is_trivially_copyable_v<PeerInfo>);

// Hash of this machine's identity (hostname and /proc boot id).
uint64_t localHostHash();
// Hash identifying this process across the machine's pid namespaces.
uint64_t localPidHash();

// The host identity a rank announces: NCCL_HOSTID's value when set (so one
// machine can emulate several hosts), else localHostHash().
uint64_t hostHashFor(const std::string& hostId);

// Fills the fields that describe this process; rank/device/busId/runtime and
// the NCCL_HOSTID value are the caller's.
[[nodiscard]] Status fillLocalPeerInfo(int rank, int device, int runtimeKind,
                                       const std::string& busId, const std::string& hostId,
                                       PeerInfo* out);

}  // namespace ferry
