#include "core/params.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "core/env.h"
#include "core/log.h"

namespace ferry {

const std::vector<ParamDef>& paramDefs() {
  static const std::vector<ParamDef> defs = {
#define FERRY_PARAM_DEF(id, name, type, def, doc) {ParamId::id, name, ParamType::type, def, doc},
      FERRY_PARAM_LIST(FERRY_PARAM_DEF)
#undef FERRY_PARAM_DEF
  };
  return defs;
}

bool parseParamInt(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str()) return false;
  int64_t mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1LL << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1LL << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1LL << 30, ++end;
  if (*end != '\0') return false;
  if (v != 0 && (v > INT64_MAX / mult || v < INT64_MIN / mult)) return false;
  *out = static_cast<int64_t>(v) * mult;
  return true;
}

bool parseParamBool(const std::string& text, bool* out) {
  const char* s = text.c_str();
  if (strcmp(s, "1") == 0 || strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0) {
    *out = true;
    return true;
  }
  if (strcmp(s, "0") == 0 || strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0) {
    *out = false;
    return true;
  }
  return false;
}

// Parses v's text as d's type; a malformed value falls back to the default
// (with a WARN) and counts as unset.
void Params::parseValue(const ParamDef& d, Value* v) {
  if (d.type == ParamType::String) return;
  bool good = true;
  if (d.type == ParamType::Int) {
    good = parseParamInt(v->text, &v->i);
  } else {
    bool b = false;
    good = parseParamBool(v->text, &b);
    v->i = b ? 1 : 0;
  }
  if (good) return;
  FERRY_WARN("Invalid value '%s' for %s; using default %s", v->text.c_str(), d.name,
             d.defaultValue);
  v->set = false;
  v->text = d.defaultValue;
  parseValue(d, v);  // the defaults always parse
}

Params Params::fromValues(const std::vector<std::pair<std::string, std::string>>& given) {
  Params p;
  const auto& defs = paramDefs();
  p.values_.resize(defs.size());
  for (size_t k = 0; k < defs.size(); ++k) {
    const ParamDef& d = defs[k];
    Value& v = p.values_[k];
    v.text = d.defaultValue;
    for (const auto& kv : given) {
      if (kv.first == d.name) {
        v.set = true;
        v.text = kv.second;
      }
    }
    parseValue(d, &v);
    if (v.set) FERRY_INFO(kLogEnv, "%s set by environment to %s", d.name, v.text.c_str());
  }
  return p;
}

Params Params::withValue(ParamId id, const std::string& text) const {
  Params p = *this;
  const size_t k = static_cast<size_t>(id);
  Value& v = p.values_[k];
  v.set = true;
  v.text = text;
  parseValue(paramDefs()[k], &v);
  return p;
}

Params Params::load() {
  std::vector<std::pair<std::string, std::string>> given;
  for (const ParamDef& d : paramDefs()) {
    if (envIsSet(d.name)) given.emplace_back(d.name, envString(d.name));
  }
  return fromValues(given);
}

int64_t Params::getInt(ParamId id) const {
  return values_[static_cast<int>(id)].i;
}
bool Params::getBool(ParamId id) const {
  return values_[static_cast<int>(id)].i != 0;
}
const std::string& Params::getString(ParamId id) const {
  return values_[static_cast<int>(id)].text;
}
bool Params::isSet(ParamId id) const {
  return values_[static_cast<int>(id)].set;
}

std::string Params::dump() const {
  std::string out;
  const auto& defs = paramDefs();
  for (size_t k = 0; k < defs.size(); ++k) {
    const ParamDef& d = defs[k];
    out += d.name;
    out += "=";
    out += values_[k].text;
    out += values_[k].set ? "  (set)" : "  (default)";
    out += "\n    ";
    out += d.doc;
    out += "\n";
  }
  return out;
}

}  // namespace ferry
