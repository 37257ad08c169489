#include "comm/config.h"

#include <cstddef>
#include <cstring>

#include "core/log.h"

namespace ferry {
namespace {

Status takeInt(int value, const char* name, int lo, int hi, int* out) {
  if (value == NCCL_CONFIG_UNDEF_INT) return ncclSuccess;
  if (value < lo || value > hi) {
    FERRY_FAIL(ncclInvalidArgument, "config.%s = %d is out of range [%d, %d]", name, value, lo, hi);
  }
  *out = value;
  return ncclSuccess;
}

Status takeBool(int value, const char* name, bool* out) {
  int v = *out ? 1 : 0;
  FERRY_CHECK(takeInt(value, name, 0, 1, &v));
  *out = v != 0;
  return ncclSuccess;
}

Status checkHeader(const ncclConfig_t* c) {
  // The first three fields exist in every config version.
  constexpr size_t kHeader = offsetof(ncclConfig_t, version) + sizeof(unsigned int);
  if (c->size < kHeader || c->size > (1u << 20)) {
    FERRY_FAIL(ncclInvalidArgument,
               "config.size = %zu is invalid; initialize configs with NCCL_CONFIG_INITIALIZER",
               c->size);
  }
  if (c->magic != kConfigMagic) {
    FERRY_FAIL(ncclInvalidArgument,
               "config.magic = 0x%x is invalid; initialize configs with NCCL_CONFIG_INITIALIZER",
               c->magic);
  }
  if (c->version < 21400 || c->version > 99999) {
    FERRY_FAIL(ncclInvalidArgument, "config.version = %u is not an NCCL version code", c->version);
  }
  return ncclSuccess;
}

}  // namespace

CommConfig defaultConfig(const Params& params) {
  CommConfig c;
  c.blocking = params.getInt(ParamId::CommBlocking) != 0;
  // NCCL_MAX_CTAS, else its older name; out-of-range values are clamped
  // with a WARN (a default must not fail init).
  int64_t maxCtas = params.getInt(ParamId::MaxCtas);
  const char* maxName = "NCCL_MAX_CTAS";
  if (maxCtas == 0) {
    maxCtas = params.getInt(ParamId::MaxNchannels);
    maxName = "NCCL_MAX_NCHANNELS";
  }
  if (maxCtas != 0) {
    const int64_t clamped = maxCtas < 1 ? 1 : maxCtas > 64 ? 64 : maxCtas;
    if (clamped != maxCtas) {
      FERRY_WARN("%s=%ld is out of range [1, 64]; using %ld", maxName, static_cast<long>(maxCtas),
                 static_cast<long>(clamped));
    }
    c.maxCTAs = static_cast<int>(clamped);
  }
  const int64_t minCtas = params.getInt(ParamId::MinCtas);
  if (minCtas != 0) {
    c.minCTAs = static_cast<int>(minCtas < 1 ? 1 : minCtas > c.maxCTAs ? c.maxCTAs : minCtas);
    if (c.minCTAs != minCtas) {
      FERRY_WARN("NCCL_MIN_CTAS=%ld is out of range [1, %d]; using %d", static_cast<long>(minCtas),
                 c.maxCTAs, c.minCTAs);
    }
  }
  return c;
}

Status resolveConfig(const ncclConfig_t* user, const CommConfig& base, CommConfig* out) {
  CommConfig c = base;
  if (user == nullptr) {
    *out = c;
    return ncclSuccess;
  }
  FERRY_CHECK(checkHeader(user));
  // Read only the bytes the user's (possibly older, smaller) struct has; the
  // rest stay "undefined" and take defaults.
  ncclConfig_t local = NCCL_CONFIG_INITIALIZER;
  memcpy(&local, user, user->size < sizeof(local) ? user->size : sizeof(local));
  user = &local;
  FERRY_CHECK(takeBool(user->blocking, "blocking", &c.blocking));
  FERRY_CHECK(takeInt(user->cgaClusterSize, "cgaClusterSize", 0, 8, &c.cgaClusterSize));
  FERRY_CHECK(takeInt(user->minCTAs, "minCTAs", 1, 64, &c.minCTAs));
  FERRY_CHECK(takeInt(user->maxCTAs, "maxCTAs", 1, 64, &c.maxCTAs));
  if (c.minCTAs > c.maxCTAs) {
    FERRY_FAIL(ncclInvalidArgument, "config.minCTAs (%d) > config.maxCTAs (%d)", c.minCTAs,
               c.maxCTAs);
  }
  if (user->netName != nullptr) c.netName = user->netName;
  FERRY_CHECK(takeBool(user->splitShare, "splitShare", &c.splitShare));
  FERRY_CHECK(takeInt(user->trafficClass, "trafficClass", 0, 255, &c.trafficClass));
  if (user->commName != nullptr) c.commName = user->commName;
  FERRY_CHECK(takeInt(user->collnetEnable, "collnetEnable", 0, 1, &c.collnetEnable));
  FERRY_CHECK(takeInt(user->CTAPolicy, "CTAPolicy", 0, 2, &c.ctaPolicy));
  FERRY_CHECK(takeBool(user->shrinkShare, "shrinkShare", &c.shrinkShare));
  FERRY_CHECK(takeInt(user->nvlsCTAs, "nvlsCTAs", 0, 64, &c.nvlsCTAs));
  FERRY_CHECK(
      takeInt(user->nChannelsPerNetPeer, "nChannelsPerNetPeer", 0, 64, &c.nChannelsPerNetPeer));
  FERRY_CHECK(takeInt(user->nvlinkCentricSched, "nvlinkCentricSched", 0, 1, &c.nvlinkCentricSched));
  *out = c;
  return ncclSuccess;
}

}  // namespace ferry
