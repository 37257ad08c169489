#include "device/kernels.h"

#include <cstdint>
#include <vector>

#include "device/coll_kernels.cuh"
#include "device/wait_kernel.h"

// Bit k set: coll_kernels_<type>.cu of algo::DataType k is built. CMake sets
// it from FERRY_KERNEL_TYPES; a build without CMake has every type.
#ifndef FERRY_COLL_TYPE_MASK
#define FERRY_COLL_TYPE_MASK 0xfff
#endif

namespace ferry::device {
namespace {

constexpr uint32_t kBuiltCollTypes = FERRY_COLL_TYPE_MASK;

// Discarded in a template when the type is not built, so that the build
// needs no definition of its collTypeKernels<>().
template <int kType>
const CollTypeKernels* builtTypeKernels() {
  if constexpr (((kBuiltCollTypes >> kType) & 1u) != 0) {
    return collTypeKernels<kType>();
  } else {
    return nullptr;
  }
}

using TypeKernelsFn = const CollTypeKernels* (*)();
constexpr TypeKernelsFn kTypeKernels[algo::kNumDataTypes] = {
    &builtTypeKernels<algo::kInt8>,       &builtTypeKernels<algo::kUint8>,
    &builtTypeKernels<algo::kInt32>,      &builtTypeKernels<algo::kUint32>,
    &builtTypeKernels<algo::kInt64>,      &builtTypeKernels<algo::kUint64>,
    &builtTypeKernels<algo::kFloat16>,    &builtTypeKernels<algo::kFloat32>,
    &builtTypeKernels<algo::kFloat64>,    &builtTypeKernels<algo::kBfloat16>,
    &builtTypeKernels<algo::kFloat8e4m3>, &builtTypeKernels<algo::kFloat8e5m2>,
};

// Built once, on first use (thread-safe static initialization).
std::vector<KernelEntry> makeKernelTable() {
  std::vector<KernelEntry> table;
  table.push_back({"ferryWaitGeqKernel", reinterpret_cast<const void*>(&ferryWaitGeqKernel)});
  table.push_back({"collKernel<int8,copy,Simple>", collCopyKernel(algo::kProtoSimple)});
  table.push_back({"collKernel<int8,copy,LL>", collCopyKernel(algo::kProtoLL)});
  table.push_back({"kernelP2p<small>", p2pKernel(true)});
  table.push_back({"kernelP2p", p2pKernel(false)});
  for (TypeKernelsFn get : kTypeKernels) {
    const CollTypeKernels* k = get();
    if (k == nullptr) continue;
    for (int p = 0; p < 2; ++p) {
      for (int f = 0; f < algo::kNumCollFns; ++f) {
        if (k->func[p][f] != nullptr) table.push_back({k->name[p][f], k->func[p][f]});
      }
    }
  }
  return table;
}

}  // namespace

const char* collFnName(int fn) {
  static const char* const kNames[algo::kNumCollFns] = {"sum", "prod",      "max",
                                                        "min", "premulsum", "copy"};
  return fn >= 0 && fn < algo::kNumCollFns ? kNames[fn] : "?";
}

const KernelEntry* allKernels(size_t* count) {
  static const std::vector<KernelEntry> table = makeKernelTable();
  *count = table.size();
  return table.data();
}

const void* waitGeqKernel() {
  return reinterpret_cast<const void*>(&ferryWaitGeqKernel);
}

const void* collKernel(int dataType, int fn, int proto) {
  if (proto != algo::kProtoSimple && proto != algo::kProtoLL) return nullptr;
  if (fn == algo::kFnCopy) return dataType == algo::kInt8 ? collCopyKernel(proto) : nullptr;
  if (dataType < 0 || dataType >= algo::kNumDataTypes || fn < 0 || fn >= algo::kNumCollFns) {
    return nullptr;
  }
  const CollTypeKernels* k = kTypeKernels[dataType]();
  return k != nullptr ? k->func[proto][fn] : nullptr;
}

}  // namespace ferry::device
