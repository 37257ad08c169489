#include "core/agreed_knobs.h"

#include <cstring>

#include "core/hash.h"

namespace ferry {
namespace {

std::string describe(const ParamDef& d, const AgreedKnobs& k, size_t i) {
  if (k.set[i] == 0) return std::string("unset, default ") + d.defaultValue;
  if (d.type == ParamType::String) return "set";
  return "set to " + std::to_string(k.value[i]);
}

}  // namespace

AgreedKnobs collectAgreedKnobs(const Params& params) {
  AgreedKnobs k;
  memset(&k, 0, sizeof(k));  // padding too: the struct travels as raw bytes
  const auto& defs = paramDefs();
  for (size_t i = 0; i < kAgreedKnobCount; ++i) {
    const ParamId id = kAgreedKnobIds[i];
    const ParamDef& d = defs[static_cast<size_t>(id)];
    // A String knob's text is stood in for by its hash: only equality matters.
    k.value[i] = d.type == ParamType::String ? static_cast<int64_t>(fnv1a(params.getString(id)))
                                             : params.getInt(id);
    k.set[i] = params.isSet(id) ? 1 : 0;
  }
  return k;
}

Status compareAgreedKnobs(const AgreedKnobs& a, int rankA, const AgreedKnobs& b, int rankB) {
  const auto& defs = paramDefs();
  for (size_t i = 0; i < kAgreedKnobCount; ++i) {
    if (a.set[i] == b.set[i] && (a.set[i] == 0 || a.value[i] == b.value[i])) continue;
    const ParamDef& d = defs[static_cast<size_t>(kAgreedKnobIds[i])];
    FERRY_FAIL(ncclInvalidUsage,
               "%s differs between rank %d (%s) and rank %d (%s): every rank of a communicator "
               "must set it the same way (or leave it unset)",
               d.name, rankA, describe(d, a, i).c_str(), rankB, describe(d, b, i).c_str());
  }
  return ncclSuccess;
}

}  // namespace ferry
