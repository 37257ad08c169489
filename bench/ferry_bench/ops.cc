#include "ferry_bench/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "ferry_bench/element.h"

namespace ferry::bench {
namespace {

// In-place alltoall and sendrecv are not defined by NCCL's API (the buffer is
// read by the peer's receive while this rank's receive overwrites it), so the
// tool measures them out-of-place only.
constexpr OpInfo kOps[kOpCount] = {
    {OpKind::AllReduce, "all_reduce", true, false, true},
    {OpKind::AllGather, "all_gather", false, false, true},
    {OpKind::ReduceScatter, "reduce_scatter", true, false, true},
    {OpKind::Broadcast, "broadcast", false, true, true},
    {OpKind::Reduce, "reduce", true, true, true},
    {OpKind::AlltoAll, "alltoall", false, false, false},
    {OpKind::SendRecv, "sendrecv", false, false, false},
    {OpKind::Gather, "gather", false, true, true},
    {OpKind::Scatter, "scatter", false, true, true},
};

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t sizeMask(size_t size) {
  return size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
}

int64_t asSigned(uint64_t bits, ncclDataType_t type) {
  const int shift = 64 - 8 * static_cast<int>(typeSize(type));
  return shift == 0 ? static_cast<int64_t>(bits) : static_cast<int64_t>(bits << shift) >> shift;
}

// Integer reduction in the type's width (sum and prod wrap like the hardware).
uint64_t reduceInt(const OpCase& op, const InputFn& input, size_t index) {
  const uint64_t mask = sizeMask(typeSize(op.type));
  const bool isSigned = isSignedInt(op.type);
  uint64_t acc = input(0, index) & mask;
  for (int r = 1; r < op.nranks; ++r) {
    const uint64_t v = input(r, index) & mask;
    switch (op.redop) {
      case ncclProd:
        acc = (acc * v) & mask;
        break;
      case ncclMax:
        acc =
            isSigned ? (asSigned(v, op.type) > asSigned(acc, op.type) ? v : acc) : std::max(acc, v);
        break;
      case ncclMin:
        acc =
            isSigned ? (asSigned(v, op.type) < asSigned(acc, op.type) ? v : acc) : std::min(acc, v);
        break;
      default:
        acc = (acc + v) & mask;
        break;  // sum, avg
    }
  }
  if (op.redop == ncclAvg) {  // sum, then divide in the type (truncates toward zero)
    acc = isSigned ? static_cast<uint64_t>(asSigned(acc, op.type) / op.nranks) & mask
                   : acc / static_cast<uint64_t>(op.nranks);
  }
  return acc;
}

uint64_t reduceFloat(const OpCase& op, const InputFn& input, size_t index) {
  double acc = bitsToDouble(input(0, index), op.type);
  for (int r = 1; r < op.nranks; ++r) {
    const double v = bitsToDouble(input(r, index), op.type);
    switch (op.redop) {
      case ncclProd:
        acc *= v;
        break;
      case ncclMax:
        acc = std::max(acc, v);
        break;
      case ncclMin:
        acc = std::min(acc, v);
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op.redop == ncclAvg) acc /= op.nranks;
  return doubleToBits(acc, op.type);
}

}  // namespace

const OpInfo& opInfo(OpKind kind) {
  return kOps[static_cast<int>(kind)];
}

bool parseOp(std::string_view name, OpKind* kind) {
  for (const OpInfo& op : kOps) {
    if (name == op.name) {
      *kind = op.kind;
      return true;
    }
  }
  return false;
}

double busFactor(OpKind kind, int nranks) {
  const double n = nranks;
  switch (kind) {
    case OpKind::AllReduce:
      return 2 * (n - 1) / n;
    case OpKind::Broadcast:
    case OpKind::Reduce:
    case OpKind::SendRecv:
      return 1;
    default:
      return (n - 1) / n;  // all-gather, reduce-scatter, alltoall, gather, scatter
  }
}

Shape shapeFor(OpKind kind, size_t bytes, size_t typeSize, int nranks, int rank) {
  Shape s;
  const size_t n = static_cast<size_t>(nranks), r = static_cast<size_t>(rank);
  const size_t total = bytes / typeSize, base = total / n;
  switch (kind) {
    case OpKind::AllGather:
    case OpKind::Gather:
      s.count = base * n, s.paramCount = base, s.sendCount = base, s.recvCount = base * n;
      s.sendInplaceOffset = base * r;
      break;
    case OpKind::ReduceScatter:
    case OpKind::Scatter:
      s.count = base * n, s.paramCount = base, s.sendCount = base * n, s.recvCount = base;
      s.recvInplaceOffset = base * r;
      break;
    case OpKind::AlltoAll:
      s.count = base * n, s.paramCount = base, s.sendCount = base * n, s.recvCount = base * n;
      break;
    default:  // all-reduce, broadcast, reduce, sendrecv
      s.count = total, s.paramCount = total, s.sendCount = total, s.recvCount = total;
      break;
  }
  s.bytes = std::max(s.sendCount, s.recvCount) * typeSize;
  return s;
}

DataGen makeDataGen(const OpCase& op, uint64_t seed) {
  DataGen g;
  g.seed = seed;
  g.op = op;
  if (opInfo(op.kind).reduces) {
    // The sum of nranks inputs must stay exact; 100 keeps wide types readable.
    const int64_t limit = exactIntLimit(op.type) / std::max(1, op.nranks);
    g.maxAbs = std::clamp<int64_t>(limit, 1, 100);
    g.tableBias = std::max<int64_t>(g.maxAbs, 2);  // products use +-2
    for (int64_t v = -g.tableBias; v <= g.tableBias; ++v) {
      g.encoded.push_back(doubleToBits(static_cast<double>(v), op.type));
    }
  }
  return g;
}

uint64_t inputBits(const DataGen& gen, int rank, size_t index) {
  const ncclDataType_t type = gen.op.type;
  const uint64_t h = mix(mix(gen.seed ^ (static_cast<uint64_t>(rank) << 40)) + index);
  if (!opInfo(gen.op.kind).reduces) return sanitizeBits(h, type);
  const bool isUnsigned = !isFloatType(type) && !isSignedInt(type);
  int64_t v;
  if (gen.op.redop == ncclProd) {
    // One rank per element contributes a 2, the others 1: |product| <= 2.
    const int nr = std::max(1, gen.op.nranks);
    v = (index % static_cast<size_t>(nr)) == static_cast<size_t>(rank) ? 2 : 1;
    if (!isUnsigned && (h & 1)) v = -v;
  } else {
    const uint64_t span = static_cast<uint64_t>(isUnsigned ? gen.maxAbs : 2 * gen.maxAbs) + 1;
    v = static_cast<int64_t>(h % span) - (isUnsigned ? 0 : gen.maxAbs);
  }
  return gen.encoded[static_cast<size_t>(v + gen.tableBias)];
}

void buildInput(const OpCase& op, const Shape& shape, int rank, const InputFn& input, void* send) {
  const size_t es = typeSize(op.type);
  parallelFor(shape.sendCount, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) storeBits(send, i, es, input(rank, i));
  });
}

uint64_t reduceElement(const OpCase& op, const InputFn& input, size_t index) {
  return isFloatType(op.type) ? reduceFloat(op, input, index) : reduceInt(op, input, index);
}

// Element i of `rank`'s receive buffer, from the inputs.
uint64_t expectedElement(const OpCase& op, size_t base, int rank, const InputFn& input, size_t i) {
  const size_t r = static_cast<size_t>(rank);
  switch (op.kind) {
    case OpKind::AllReduce:
    case OpKind::Reduce:
      return reduceElement(op, input, i);
    case OpKind::ReduceScatter:
      return reduceElement(op, input, r * base + i);
    case OpKind::Broadcast:
      return input(op.root, i);
    case OpKind::AllGather:
    case OpKind::Gather:
      return input(static_cast<int>(i / base), i % base);
    case OpKind::AlltoAll:
      return input(static_cast<int>(i / base), r * base + i % base);
    case OpKind::SendRecv:
      return input((rank - 1 + op.nranks) % op.nranks, i);
    case OpKind::Scatter:
      return input(op.root, r * base + i);
  }
  return 0;
}

bool buildExpected(const OpCase& op, const Shape& shape, int rank, const InputFn& input,
                   void* expected) {
  const bool undefinedHere =
      (op.kind == OpKind::Reduce || op.kind == OpKind::Gather) && rank != op.root;
  if (undefinedHere) return false;
  const size_t es = typeSize(op.type), base = shape.paramCount;
  parallelFor(shape.recvCount, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      storeBits(expected, i, es, expectedElement(op, base, rank, input, i));
    }
  });
  return true;
}

Tolerance toleranceFor(const OpCase& op, const DataGen& gen) {
  Tolerance t;
  if (!opInfo(op.kind).reduces) return t;
  t.bitwise = false;
  if (op.redop != ncclAvg) return t;  // small integers: every other reduction is exact
  if (!isFloatType(op.type)) {
    t.intTol = 1;  // sum then divide; allow either rounding of the quotient
    return t;
  }
  // Avg may scale each input by 1/n before summing: n+1 roundings of values
  // no larger than maxAbs, each within half an ulp of the type.
  int manBits = 52;
  switch (op.type) {
    case ncclFloat16:
      manBits = 10;
      break;
    case ncclBfloat16:
      manBits = 7;
      break;
    case ncclFloat8e4m3:
      manBits = 3;
      break;
    case ncclFloat8e5m2:
      manBits = 2;
      break;
    case ncclFloat32:
      manBits = 23;
      break;
    default:
      break;
  }
  t.absTol = (op.nranks + 1) * static_cast<double>(gen.maxAbs) * std::ldexp(1.0, -manBits);
  return t;
}

size_t countWrong(const void* got, const void* expected, size_t count, ncclDataType_t type,
                  const Tolerance& tol, size_t* firstWrong) {
  const size_t es = typeSize(type);
  const uint64_t mask = sizeMask(es);
  const bool isFloat = isFloatType(type);
  std::atomic<size_t> wrong{0}, first{count};
  parallelFor(count, [&](size_t begin, size_t end) {
    size_t bad = 0, firstHere = count;
    for (size_t i = begin; i < end; ++i) {
      const uint64_t g = loadBits(got, i, es) & mask, w = loadBits(expected, i, es) & mask;
      bool mismatch;
      if (tol.bitwise) {
        mismatch = g != w;
      } else if (isFloat) {
        const double gv = bitsToDouble(g, type), wv = bitsToDouble(w, type);
        mismatch = std::isnan(gv) || !(std::fabs(gv - wv) <= tol.absTol);
      } else {
        const int64_t d =
            isSignedInt(type) ? asSigned(g, type) - asSigned(w, type) : static_cast<int64_t>(g - w);
        mismatch = d > tol.intTol || d < -tol.intTol;
      }
      if (mismatch && bad++ == 0) firstHere = i;
    }
    // Relaxed: the totals are read only after parallelFor joined every worker.
    wrong.fetch_add(bad, std::memory_order_relaxed);
    size_t seen = first.load(std::memory_order_relaxed);
    while (firstHere < seen &&
           !first.compare_exchange_weak(seen, firstHere, std::memory_order_relaxed)) {
    }
  });
  if (wrong.load() > 0 && firstWrong != nullptr) *firstWrong = first.load();
  return wrong.load();
}

void parallelFor(size_t count, const std::function<void(size_t, size_t)>& body) {
  constexpr size_t kMinPerThread = 1 << 16;
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min<size_t>({hw, 32, (count + kMinPerThread - 1) / kMinPerThread});
  if (threads <= 1) {
    body(0, count);
    return;
  }
  const size_t chunk = (count + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) {
    const size_t b = t * chunk, e = std::min(count, b + chunk);
    if (b < e) workers.emplace_back(body, b, e);
  }
  body(0, std::min(count, chunk));
  for (std::thread& w : workers) w.join();  // join publishes every worker's writes
}

}  // namespace ferry::bench
