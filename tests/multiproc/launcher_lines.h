// The long lines of launcher_rank's "lines" mode, computed the same way by the
// rank that prints them and by the test that checks the relayed output.
#pragma once

#include <cstdint>
#include <string>

#include "common/random.h"

namespace ferry::test {

// Line `index` of `rank`: a header naming both, then random letters, between
// maxLen/2 and maxLen characters in all. Never contains '\n'.
inline std::string launcherLine(uint64_t seed, int rank, int index, int maxLen) {
  Rng rng(seed, (static_cast<uint64_t>(rank) << 32) | static_cast<uint64_t>(index));
  std::string line = "r=" + std::to_string(rank) + " i=" + std::to_string(index) + " ";
  size_t len = static_cast<size_t>(maxLen / 2) + rng.below(static_cast<uint64_t>(maxLen / 2) + 1);
  while (line.size() < len) line.push_back(static_cast<char>('a' + rng.below(26)));
  return line;
}

}  // namespace ferry::test
