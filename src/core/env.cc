#include "core/env.h"

#include <cstdlib>

namespace ferry {

std::string envString(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool envIsSet(const char* name) {
  return std::getenv(name) != nullptr;
}

}  // namespace ferry
