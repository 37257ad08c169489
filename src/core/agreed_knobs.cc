#include "core/agreed_knobs.h"

#include <cstring>

namespace ferry {
namespace {

// FNV-1a: stands in for a String knob's text (only equality matters).
int64_t hashText(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char ch : text) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
  return static_cast<int64_t>(h);
}

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
    k.value[i] = d.type == ParamType::String ? hashText(params.getString(id)) : params.getInt(id);
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
