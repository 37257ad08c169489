// Knobs that every rank of a communicator must set the same way: each rank
// derives from them, on its own, a decision its peers must mirror (which
// path a message of B bytes takes, how a kernel-p2p lane or a collective
// FIFO is laid out, which protocol a collective uses). Ranks that disagree
// would not fail: they would wait for each other forever, or misread each
// other's buffers. So every rank publishes its values at init (PeerInfo)
// and init fails on every rank, naming the knob, when any rank differs.
//
// A knob counts as "set the same way" when both ranks leave it unset, or
// both set it to the same value: several knobs change meaning with being
// set at all (NCCL_P2P_LL_THRESHOLD yields to FERRY_P2P_LL_MAX_BYTES only
// when that one is set), so an explicit default on one rank only is refused.
#pragma once

#include <cstdint>
#include <iterator>

#include "core/params.h"
#include "core/status.h"

namespace ferry {

inline constexpr ParamId kAgreedKnobIds[] = {
    ParamId::PassSm,
    ParamId::P2pKernelMaxBytes,
    ParamId::P2pKernelLanes,
    ParamId::P2pKernelLaneBytes,
    ParamId::P2pKernelLaneSlots,
    ParamId::P2pFifoBytes,
    ParamId::P2pKernelAcrossHosts,
    ParamId::P2pLlMaxBytes,
    ParamId::P2pLlLaneBytes,
    ParamId::P2pLlThreshold,
    ParamId::Proto,
    ParamId::WinCollMinBytes,
    ParamId::WinCollOps,
    ParamId::Algo,
    ParamId::CollChannels,
    ParamId::CollSlots,
    ParamId::CollSlotBytes,
    ParamId::CollLlSlotBytes,
    ParamId::CollLlMaxBytes,
    ParamId::CollNetLlMaxBytes,
    ParamId::CollLlChannelBytes,
    ParamId::CollNetHopBytes,
    ParamId::NetChunkBytes,
    ParamId::NetLinks,
    ParamId::RuntimeConnect,
};
inline constexpr size_t kAgreedKnobCount = std::size(kAgreedKnobIds);

// One rank's values, as raw bytes inside PeerInfo (trivially copyable).
struct AgreedKnobs {
  int64_t value[kAgreedKnobCount];  // Int/Bool: the value; String: a hash of the text
  uint8_t set[kAgreedKnobCount];    // 1: the rank's environment set it
};

AgreedKnobs collectAgreedKnobs(const Params& params);

// ncclSuccess when rank `b` set every agreed knob the way rank `a` did;
// otherwise ncclInvalidUsage, with a WARN naming the first knob that differs
// and both ranks' settings.
[[nodiscard]] Status compareAgreedKnobs(const AgreedKnobs& a, int rankA, const AgreedKnobs& b,
                                        int rankB);

}  // namespace ferry
