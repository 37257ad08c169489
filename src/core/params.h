// Typed registry of every environment knob (core/param_list.h is the table).
//
// A Params value is an immutable snapshot of the environment taken by
// Params::load(); a communicator takes one at init and keeps it, so a later
// setenv never changes a running communicator. Reading a knob that failed to
// parse yields its default, with a WARN at load time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

enum class ParamType { Int, Bool, String };

enum class ParamId : int {
#define FERRY_PARAM_ENUM(id, name, type, def, doc) id,
#include "core/param_list.h"
  FERRY_PARAM_LIST(FERRY_PARAM_ENUM)
#undef FERRY_PARAM_ENUM
      kCount
};

struct ParamDef {
  ParamId id;
  const char* name;
  ParamType type;
  const char* defaultValue;
  const char* doc;
};

const std::vector<ParamDef>& paramDefs();

// Parses an Int knob value; false when malformed. Accepts K/M/G suffixes.
bool parseParamInt(const std::string& text, int64_t* out);
// Parses a Bool knob value (0/1/true/false/yes/no); false when malformed.
bool parseParamBool(const std::string& text, bool* out);

class Params {
 public:
  // Snapshot of the current environment.
  static Params load();
  // Snapshot with explicit values (name -> text); unset names take defaults.
  static Params fromValues(const std::vector<std::pair<std::string, std::string>>& values);
  // This snapshot with one knob set to `text` (for communicators Ferry makes
  // for itself, which inherit their parent's settings but a few).
  Params withValue(ParamId id, const std::string& text) const;

  int64_t getInt(ParamId id) const;
  bool getBool(ParamId id) const;
  const std::string& getString(ParamId id) const;
  // Whether the user set the knob (vs. default).
  bool isSet(ParamId id) const;

  // One line per knob: NAME=value (default ...) description.
  std::string dump() const;

 private:
  struct Value {
    bool set = false;
    std::string text;
    int64_t i = 0;
  };
  static void parseValue(const ParamDef& d, Value* v);
  std::vector<Value> values_;
};

}  // namespace ferry
