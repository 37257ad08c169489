#include "comm/coll_algo.h"

#include <cctype>

#include "comm/cost_model.h"
#include "core/log.h"

namespace ferry {
namespace {

std::string lowered(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return out;
}

// The collective an entry names (-1: unknown).
int collByName(const std::string& name) {
  static const char* const names[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                      "reduce"};
  for (int c = 0; c < algo::kNumCollKinds; ++c) {
    if (name == names[c]) return c;
  }
  return -1;
}

// One list ("ring,tree" or "^tree") into a mask.
Status parseList(const std::string& text, const std::string& list, AlgoMask* mask) {
  const bool exclude = !list.empty() && list[0] == '^';
  bool ring = false, tree = false;
  for (size_t b = exclude ? 1 : 0; b <= list.size();) {
    size_t e = list.find(',', b);
    if (e == std::string::npos) e = list.size();
    const std::string name = lowered(list.substr(b, e - b));
    if (name == "ring") {
      ring = true;
    } else if (name == "tree" || name == "hier") {
      tree = true;
    } else if (!name.empty() && name != "collnetdirect" && name != "collnetchain" &&
               name != "nvls" && name != "nvlstree" && name != "pat") {
      FERRY_FAIL(ncclInvalidArgument,
                 "NCCL_ALGO=%s: unknown algorithm '%s' (Ring, Tree, CollnetDirect, CollnetChain, "
                 "NVLS, NVLSTree, PAT)",
                 text.c_str(), name.c_str());
    }
    b = e + 1;
  }
  mask->ring = exclude ? !ring : ring;
  mask->tree = exclude ? !tree : tree;
  return ncclSuccess;
}

}  // namespace

Status parseAlgos(const std::string& text, AlgoMask masks[algo::kNumCollKinds]) {
  AlgoMask parsed[algo::kNumCollKinds];
  for (size_t b = 0; b <= text.size() && !text.empty();) {
    size_t e = text.find(';', b);
    if (e == std::string::npos) e = text.size();
    const std::string entry = text.substr(b, e - b);
    b = e + 1;
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      AlgoMask all;
      FERRY_CHECK(parseList(text, entry, &all));
      for (AlgoMask& m : parsed) m = all;
      continue;
    }
    const int coll = collByName(lowered(entry.substr(0, colon)));
    if (coll < 0) {
      FERRY_FAIL(ncclInvalidArgument,
                 "NCCL_ALGO=%s: unknown collective '%s' (allreduce, allgather, reducescatter, "
                 "broadcast, reduce)",
                 text.c_str(), entry.substr(0, colon).c_str());
    }
    FERRY_CHECK(parseList(text, entry.substr(colon + 1), &parsed[coll]));
  }
  for (int c = 0; c < algo::kNumCollKinds; ++c) masks[c] = parsed[c];
  return ncclSuccess;
}

bool chooseHierAllReduce(const AlgoMask& mask, const HierShape& shape, uint64_t bytes,
                         bool hostRuntime) {
  if (!mask.tree || shape.hosts < 2 || shape.perHost < 2) return false;
  if (!mask.ring) return true;
  return allReduceHierUs(shape.hosts, shape.perHost, bytes, hostRuntime) <
         allReduceRingUs(shape.hosts * shape.perHost, shape.hosts, bytes, hostRuntime);
}

}  // namespace ferry
