#include "core/cpu_profile.h"

#include <cstdio>

namespace ferry {
namespace {

const char* slotName(size_t i) {
  static const char* const kNames[] = {
      "groupend",       "coll.launch",   "p2p.kernel",   "p2p.smfree",    "p2p.streams",
      "p2p.claim",      "p2p.map",       "p2p.pushwait", "p2p.stagewait", "p2p.ready",
      "p2p.copysecond", "p2p.userwaits", "p2p.fences"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(ProfSlot::kCount),
                "a name per slot");
  return kNames[i];
}

}  // namespace

void CpuProfile::add(ProfSlot slot, int64_t ns) {
  if (ns < 0) ns = 0;
  Slot& s = slots_[static_cast<size_t>(slot)];
  // Relaxed: statistics (see Slot).
  s.n.fetch_add(1, std::memory_order_relaxed);
  s.totalNs.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  uint64_t prev = s.maxNs.load(std::memory_order_relaxed);
  while (
      static_cast<uint64_t>(ns) > prev &&
      !s.maxNs.compare_exchange_weak(prev, static_cast<uint64_t>(ns), std::memory_order_relaxed)) {
  }
}

std::string CpuProfile::describe() const {
  std::string out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const uint64_t n = slots_[i].n.load(std::memory_order_relaxed);
    if (n == 0) continue;
    const double totalUs =
        static_cast<double>(slots_[i].totalNs.load(std::memory_order_relaxed)) / 1000.0;
    const double maxUs =
        static_cast<double>(slots_[i].maxNs.load(std::memory_order_relaxed)) / 1000.0;
    char part[160];
    snprintf(part, sizeof(part), "%s%s n=%llu avg=%.1f max=%.1f", out.empty() ? "" : "; ",
             slotName(i), static_cast<unsigned long long>(n), totalUs / static_cast<double>(n),
             maxUs);
    out += part;
    // rest: the average without the largest sample, which is often a
    // one-time cost (a first peer mapping, a first kernel load) that would
    // hide the steady state in avg. A torn read (see Slot) may leave the max
    // out of the total: clamp at 0.
    if (n >= 2) {
      const double rest = totalUs > maxUs ? (totalUs - maxUs) / static_cast<double>(n - 1) : 0.0;
      snprintf(part, sizeof(part), " rest=%.1f", rest);
      out += part;
    }
    out += " us";
  }
  return out;
}

}  // namespace ferry
