// 64-bit FNV-1a: a hash that is stable across processes and builds (unlike
// std::hash), for values ranks compare or derive keys from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;

inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

inline uint64_t fnv1a(const std::string& s, uint64_t h = kFnv1aBasis) {
  return fnv1a(s.data(), s.size(), h);
}

}  // namespace ferry
