// A test double of libnccl.so.2 for ferry-bench's own tests: one process,
// ncclCommInitAll over N emulated devices in host memory, every collective
// and grouped send/recv executed at ncclGroupEnd (or at the call for one
// rank), so the tool's buffers, in-place layouts, counts, grouping and
// checks are exercised end to end before the real ops exist.
//
// Built twice: with FAKE_NEW_COLLS (exports ncclAlltoAll/Gather/Scatter) and
// without (ferry-bench must fall back to grouped send/recv). With
// FAKE_NCCL_CORRUPT=1 in the environment, one element of rank 0's output is
// flipped per op, and ferry-bench must report #wrong and exit 1.
// Single-threaded, like the tool's -g mode.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ferry.h"
#include "ferry_bench/element.h"
#include "nccl.h"

using ferry::bench::bitsToDouble;
using ferry::bench::doubleToBits;
using ferry::bench::loadBits;
using ferry::bench::storeBits;
using ferry::bench::typeSize;

namespace {

enum class Kind {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AlltoAll,
  Gather,
  Scatter,
  Send,
  Recv
};

struct Call {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;  // root, or peer for send/recv
};

struct World {
  int n = 0;
  std::vector<std::vector<Call>> pending;
};

struct FakeComm {
  World* world;
  int rank;
};

int gGroupDepth = 0;
std::vector<World*> gWorlds;

bool corrupt() {
  const char* v = getenv("FAKE_NCCL_CORRUPT");
  return v != nullptr && v[0] == '1';
}

uint64_t mask(ncclDataType_t t) {
  return typeSize(t) == 8 ? ~0ull : (1ull << (8 * typeSize(t))) - 1;
}

bool isFloat(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 ||
         t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
}

int64_t sext(uint64_t v, ncclDataType_t t) {
  const int sh = 64 - 8 * static_cast<int>(typeSize(t));
  return sh ? static_cast<int64_t>(v << sh) >> sh : static_cast<int64_t>(v);
}

// Element-wise reduction of n input vectors (copied before any output is written).
uint64_t combine(const std::vector<std::vector<char>>& in, size_t i, ncclDataType_t t,
                 ncclRedOp_t op) {
  const size_t es = typeSize(t);
  const bool sgn = t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
  if (isFloat(t)) {
    double acc = bitsToDouble(loadBits(in[0].data(), i, es), t);
    for (size_t r = 1; r < in.size(); ++r) {
      const double v = bitsToDouble(loadBits(in[r].data(), i, es), t);
      acc = op == ncclProd  ? acc * v
            : op == ncclMax ? (v > acc ? v : acc)
            : op == ncclMin ? (v < acc ? v : acc)
                            : acc + v;
    }
    if (op == ncclAvg) acc /= static_cast<double>(in.size());
    return doubleToBits(acc, t);
  }
  uint64_t acc = loadBits(in[0].data(), i, es) & mask(t);
  for (size_t r = 1; r < in.size(); ++r) {
    const uint64_t v = loadBits(in[r].data(), i, es) & mask(t);
    const bool greater = sgn ? sext(v, t) > sext(acc, t) : v > acc;
    if (op == ncclProd)
      acc = (acc * v) & mask(t);
    else if (op == ncclMax)
      acc = greater ? v : acc;
    else if (op == ncclMin)
      acc = (!greater && v != acc) ? v : acc;
    else
      acc = (acc + v) & mask(t);
  }
  if (op == ncclAvg) {
    const int64_t n = static_cast<int64_t>(in.size());
    acc = sgn ? static_cast<uint64_t>(sext(acc, t) / n) & mask(t) : acc / static_cast<uint64_t>(n);
  }
  return acc;
}

std::vector<char> copyOf(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  return std::vector<char>(c, c + bytes);
}

// Executes the k-th collective of every rank.
void runCollective(World& w, const std::vector<Call>& calls) {
  const Call& c0 = calls[0];
  const ncclDataType_t t = c0.type;
  const size_t es = typeSize(t), n = static_cast<size_t>(w.n), cnt = c0.count;
  std::vector<std::vector<char>> in(n);
  const bool sendsAll =
      c0.kind == Kind::ReduceScatter || c0.kind == Kind::AlltoAll || c0.kind == Kind::Scatter;
  for (size_t r = 0; r < n; ++r) {
    const bool hasInput = c0.kind != Kind::Scatter || static_cast<int>(r) == c0.root;
    if (hasInput) in[r] = copyOf(calls[r].send, (sendsAll ? cnt * n : cnt) * es);
  }
  for (size_t r = 0; r < n; ++r) {
    char* out = static_cast<char*>(calls[r].recv);
    const bool isRoot = static_cast<int>(r) == c0.root;
    switch (c0.kind) {
      case Kind::AllReduce:
      case Kind::Reduce:
        if (c0.kind == Kind::Reduce && !isRoot) break;
        for (size_t i = 0; i < cnt; ++i) storeBits(out, i, es, combine(in, i, t, c0.op));
        break;
      case Kind::ReduceScatter:
        for (size_t i = 0; i < cnt; ++i) storeBits(out, i, es, combine(in, r * cnt + i, t, c0.op));
        break;
      case Kind::Broadcast:
        memcpy(out, in[c0.root].data(), cnt * es);
        break;
      case Kind::Gather:
        if (!isRoot) break;
        [[fallthrough]];
      case Kind::AllGather:
        for (size_t p = 0; p < n; ++p) memcpy(out + p * cnt * es, in[p].data(), cnt * es);
        break;
      case Kind::AlltoAll:
        for (size_t p = 0; p < n; ++p)
          memcpy(out + p * cnt * es, in[p].data() + r * cnt * es, cnt * es);
        break;
      case Kind::Scatter:
        memcpy(out, in[c0.root].data() + r * cnt * es, cnt * es);
        break;
      default:
        break;
    }
  }
}

ncclResult_t runP2p(World& w, std::vector<std::vector<Call>>& p2p) {
  // Snapshot every send first: a grouped exchange must not see its own writes.
  std::vector<std::vector<std::pair<int, std::vector<char>>>> sent(w.n);  // by destination
  for (int r = 0; r < w.n; ++r) {
    for (const Call& c : p2p[r]) {
      if (c.kind == Kind::Send)
        sent[c.root].push_back({r, copyOf(c.send, c.count * typeSize(c.type))});
    }
  }
  for (int r = 0; r < w.n; ++r) {
    for (const Call& c : p2p[r]) {
      if (c.kind != Kind::Recv) continue;
      bool found = false;
      for (auto it = sent[r].begin(); it != sent[r].end(); ++it) {
        if (it->first == c.root && it->second.size() == c.count * typeSize(c.type)) {
          memcpy(c.recv, it->second.data(), it->second.size());
          sent[r].erase(it);
          found = true;
          break;
        }
      }
      if (!found) return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

ncclResult_t flush(World& w) {
  std::vector<std::vector<Call>> p2p(w.n), colls(w.n);
  for (int r = 0; r < w.n; ++r) {
    for (const Call& c : w.pending[r])
      (c.kind == Kind::Send || c.kind == Kind::Recv ? p2p : colls)[r].push_back(c);
    w.pending[r].clear();
  }
  for (int r = 1; r < w.n; ++r) {
    if (colls[r].size() != colls[0].size()) return ncclInvalidUsage;
  }
  for (size_t k = 0; k < colls[0].size(); ++k) {
    std::vector<Call> calls;
    for (int r = 0; r < w.n; ++r) calls.push_back(colls[r][k]);
    runCollective(w, calls);
    if (corrupt() && calls[0].recv != nullptr && calls[0].count > 0) {
      static_cast<char*>(calls[0].recv)[0] ^= 0x10;
    }
  }
  const ncclResult_t r = runP2p(w, p2p);
  if (corrupt()) {
    for (const Call& c : p2p[0]) {
      if (c.kind == Kind::Recv && c.count > 0) static_cast<char*>(c.recv)[0] ^= 0x10;
    }
  }
  return r;
}

ncclResult_t post(ncclComm_t comm, const Call& call) {
  if (comm == nullptr) return ncclInvalidArgument;
  auto* fc = reinterpret_cast<FakeComm*>(comm);
  fc->world->pending[fc->rank].push_back(call);
  if (gGroupDepth > 0) return ncclSuccess;
  // Outside a group, the op runs once every rank has called it.
  for (auto& q : fc->world->pending) {
    if (q.empty()) return ncclSuccess;
  }
  return flush(*fc->world);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* v) {
  *v = 22809;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "fake error";
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof(*id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) {
  return ncclInvalidUsage;
}
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int n, const int*) {
  auto* w = new World;  // freed when the last comm is destroyed
  w->n = n;
  w->pending.resize(n);
  gWorlds.push_back(w);
  for (int i = 0; i < n; ++i) comms[i] = reinterpret_cast<ncclComm_t>(new FakeComm{w, i});
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  auto* fc = reinterpret_cast<FakeComm*>(comm);
  if (fc->rank == fc->world->n - 1) {
    std::erase(gWorlds, fc->world);
    delete fc->world;
  }
  delete fc;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() {
  ++gGroupDepth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (gGroupDepth == 0) return ncclInvalidUsage;
  if (--gGroupDepth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  for (World* w : gWorlds) {
    const ncclResult_t r = flush(*w);
    if (result == ncclSuccess) result = r;
  }
  return result;
}
ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t) {
  return post(c, {Kind::AllReduce, s, r, n, t, op, -1});
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t) {
  return post(c, {Kind::AllGather, s, r, n, t, ncclSum, -1});
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t) {
  return post(c, {Kind::ReduceScatter, s, r, n, t, op, -1});
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t) {
  return post(c, {Kind::Broadcast, s, r, n, t, ncclSum, root});
}
ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, cudaStream_t) {
  return post(c, {Kind::Reduce, s, r, n, t, op, root});
}
#ifdef FAKE_NEW_COLLS
ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                          cudaStream_t) {
  return post(c, {Kind::AlltoAll, s, r, n, t, ncclSum, -1});
}
ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                        cudaStream_t) {
  return post(c, {Kind::Gather, s, r, n, t, ncclSum, root});
}
ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                         cudaStream_t) {
  return post(c, {Kind::Scatter, s, r, n, t, ncclSum, root});
}
#endif
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t) {
  return post(c, {Kind::Send, s, nullptr, n, t, ncclSum, peer});
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
  return post(c, {Kind::Recv, nullptr, r, n, t, ncclSum, peer});
}
ncclResult_t ncclFerrySetDevice(int) {
  return ncclSuccess;
}
ncclResult_t ncclFerryStreamCreate(cudaStream_t* s) {
  static int token;
  *s = reinterpret_cast<cudaStream_t>(&token);
  return ncclSuccess;
}
ncclResult_t ncclFerryStreamSynchronize(cudaStream_t) {
  return ncclSuccess;
}
ncclResult_t ncclFerryStreamDestroy(cudaStream_t) {
  return ncclSuccess;
}

}  // extern "C"
