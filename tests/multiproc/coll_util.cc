#include "coll_util.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "ferry.h"
#include "mp_check.h"

#ifdef FERRY_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace ferry::test {
namespace {
std::atomic<uint64_t> gVerified{0};
}  // namespace

uint64_t verifiedCount() {
  return gVerified.load();
}

CollRun::CollRun(const World& w, const CollSpec& spec)
    : world_(w), spec_(spec), data_(w.seed, spec, w.nranks), elemSize_(dataTypeSize(spec.type)) {}

// Buffers by NCCL's conventions. In place: all-gather's sendbuff is block
// `rank` of recvbuff; reduce-scatter's recvbuff is block `rank` of sendbuff;
// the others use one buffer for both.
void CollRun::layOut() {
  const size_t n = static_cast<size_t>(world_.nranks), me = static_cast<size_t>(world_.rank);
  const size_t count = spec_.count, es = elemSize_;
  auto make = [&](size_t elems) {
    auto b = std::make_unique<TestBuffer>(elems * es, spec_.kind);
    EXPECT_TRUE(b->ok(), "%s: allocation of %zu bytes failed", describe(spec_).c_str(), elems * es);
    return b;
  };
  auto ptr = [](const std::unique_ptr<TestBuffer>& b) { return static_cast<char*>(b->data()); };
  switch (spec_.coll) {
    case Coll::AllGather:
      recv_ = make(n * count);
      recvPtr_ = ptr(recv_);
      if (spec_.inPlace) {
        sendPtr_ = recvPtr_ + me * count * es;
      } else {
        send_ = make(count);
        sendPtr_ = ptr(send_);
      }
      outBuf_ = recv_.get();
      break;
    case Coll::ReduceScatter:
      send_ = make(n * count);
      sendPtr_ = ptr(send_);
      if (spec_.inPlace) {
        recvPtr_ = sendPtr_ + me * count * es;
        outBuf_ = send_.get();
        outOffset_ = me * count * es;
      } else {
        recv_ = make(count);
        recvPtr_ = ptr(recv_);
        outBuf_ = recv_.get();
      }
      break;
    default: {  // all-reduce, broadcast, reduce: count elements in and out
      const bool nonRoot = hasRoot(spec_.coll) && world_.rank != spec_.root;
      send_ = make(count);
      sendPtr_ = ptr(send_);
      if (spec_.inPlace) {
        recvPtr_ = sendPtr_;
        outBuf_ = send_.get();
      } else if (spec_.coll == Coll::Reduce && nonRoot && spec_.tag % 2 == 1) {
        recvPtr_ = nullptr;  // NCCL: recvbuff may be NULL except on the root
      } else {
        recv_ = make(count);
        recvPtr_ = ptr(recv_);
        outBuf_ = recv_.get();
      }
      if (spec_.coll == Coll::Reduce && nonRoot) outBuf_ = nullptr;  // unspecified off the root
      break;
    }
  }
}

void CollRun::fill() {
  const size_t es = elemSize_, inCount = data_.inputCount();
  std::vector<char> host(inCount * es);
  if (spec_.coll == Coll::Broadcast && world_.rank != spec_.root) {
    fillPoison(host.data(), inCount, spec_.type);  // never read: must not reach anyone
  } else {
    data_.input(world_.rank, 0, inCount, host.data());
  }
  if (spec_.coll == Coll::AllGather && spec_.inPlace) {
    std::vector<char> out(recv_->size());
    fillPoison(out.data(), out.size() / es, spec_.type);
    if (!host.empty()) memcpy(out.data() + world_.rank * host.size(), host.data(), host.size());
    recv_->upload(out.data(), out.size());
    return;
  }
  send_->upload(host.data(), host.size());
  if (recv_ != nullptr) {
    std::vector<char> poison(recv_->size());
    fillPoison(poison.data(), poison.size() / es, spec_.type);
    recv_->upload(poison.data(), poison.size());
  }
}

bool CollRun::setUpOp(ncclComm_t comm, const SharedScalarOp* shared) {
  static constexpr ncclRedOp_t kBuiltIn[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  if (!isReducing(spec_.coll)) return true;
  if (spec_.red != Red::PreMulHost && spec_.red != Red::PreMulDevice) {
    op_ = kBuiltIn[static_cast<int>(spec_.red)];
    return true;
  }
  const std::string what = describe(spec_);
  uint64_t bits = data_.scalarBits(world_.rank);
  ncclResult_t r;
  if (spec_.red == Red::PreMulHost) {
    hostScalar_ = bits;
    r = ncclRedOpCreatePreMulSum(&op_, &hostScalar_, spec_.type, ncclScalarHostImmediate, comm);
    hostScalar_ = ~bits;  // read before the call returned: later values must not matter
  } else if (shared != nullptr) {
    shared->scalar->upload(&bits, elemSize_);
    op_ = shared->op;
    return true;
  } else {
    scalar_ = std::make_unique<TestBuffer>(
        elemSize_, spec_.tag % 2 == 0 ? BufferKind::Mapped : BufferKind::Plain);
    if (!scalar_->ok()) {
      EXPECT_TRUE(false, "%s: scalar allocation failed", what.c_str());
      return false;
    }
    scalar_->upload(&bits, elemSize_);
    r = ncclRedOpCreatePreMulSum(&op_, scalar_->data(), spec_.type, ncclScalarDevice, comm);
  }
  EXPECT_TRUE(r == ncclSuccess, "%s: ncclRedOpCreatePreMulSum returned %d (%s); last error: %s",
              what.c_str(), static_cast<int>(r), ncclGetErrorString(r), ncclGetLastError(comm));
  ownsOp_ = r == ncclSuccess;
  return ownsOp_;
}

bool CollRun::prepare(ncclComm_t comm, const SharedScalarOp* shared) {
  const int before = gFailures.load();
  layOut();
  if (gFailures.load() != before) return false;
  fill();
  if (!setUpOp(comm, shared)) return false;
  uploadsDone();
  return true;
}

bool CollRun::post(ncclComm_t comm, cudaStream_t stream) {
  const ncclDataType_t t = spec_.type;
  const size_t count = spec_.count;
  const char* fn = "";
  ncclResult_t r = ncclInternalError;
  switch (spec_.coll) {
    case Coll::AllReduce:
      fn = "ncclAllReduce";
      r = ncclAllReduce(sendPtr_, recvPtr_, count, t, op_, comm, stream);
      break;
    case Coll::AllGather:
      fn = "ncclAllGather";
      r = ncclAllGather(sendPtr_, recvPtr_, count, t, comm, stream);
      break;
    case Coll::ReduceScatter:
      fn = "ncclReduceScatter";
      r = ncclReduceScatter(sendPtr_, recvPtr_, count, t, op_, comm, stream);
      break;
    case Coll::Broadcast:
      if (spec_.inPlace && spec_.tag % 2 == 1) {  // the deprecated in-place form
        fn = "ncclBcast";
        r = ncclBcast(sendPtr_, count, t, spec_.root, comm, stream);
      } else {
        fn = "ncclBroadcast";
        r = ncclBroadcast(sendPtr_, recvPtr_, count, t, spec_.root, comm, stream);
      }
      break;
    case Coll::Reduce:
      fn = "ncclReduce";
      r = ncclReduce(sendPtr_, recvPtr_, count, t, op_, spec_.root, comm, stream);
      break;
  }
  EXPECT_TRUE(r == ncclSuccess, "%s: %s returned %d (%s); last error: %s", describe(spec_).c_str(),
              fn, static_cast<int>(r), ncclGetErrorString(r), ncclGetLastError(comm));
  posted_ = r == ncclSuccess;
  return posted_;
}

void CollRun::releaseOp(ncclComm_t comm) {
  if (!ownsOp_) return;
  EXPECT_OK(ncclRedOpDestroy(op_, comm));
  ownsOp_ = false;
}

bool CollRun::checkInputIntact() {
  // Out of place the send buffer is const; broadcast's is read on the root only.
  if (spec_.inPlace || (spec_.coll == Coll::Broadcast && world_.rank != spec_.root)) return true;
  const size_t bytes = data_.inputCount() * elemSize_;
  std::vector<char> got(bytes), want(bytes);
  send_->download(got.data(), bytes);
  data_.input(world_.rank, 0, data_.inputCount(), want.data());
  if (memcmp(got.data(), want.data(), bytes) == 0) return true;
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  EXPECT_TRUE(false, "%s: rank %d's send buffer was modified (byte %zu)", describe(spec_).c_str(),
              world_.rank, i);
  return false;
}

bool CollRun::verify() {
  if (!posted_) return false;
  ++gVerified;
  bool ok = true;
  if (outBuf_ != nullptr) {
    std::vector<char> got(data_.outputCount() * elemSize_);
    outBuf_->download(got.data(), got.size(), outOffset_);
    const std::string what = describe(spec_) + " rank " + std::to_string(world_.rank);
    size_t bad = data_.check(world_.rank, got.data(), what.c_str());
    EXPECT_TRUE(bad == 0, "%s: %zu of %zu output elements wrong", what.c_str(), bad,
                data_.outputCount());
    ok = bad == 0;
  }
  return checkInputIntact() && ok;
}

size_t randomCount(Rng& rng, size_t maxCount) {
  switch (rng.below(8)) {
    case 0:
      return 0;
    case 1:
      return std::min<size_t>(maxCount, 1 + rng.below(8));
    default: {
      int maxLog = 0;
      while ((size_t{2} << maxLog) <= maxCount) ++maxLog;
      size_t cap = size_t{1} << rng.below(maxLog + 1);
      return std::min<size_t>(maxCount, rng.below(cap + cap / 2 + 1));
    }
  }
}

CollSpec randomSpec(Rng& rng, int nranks, size_t maxCount, uint64_t tag) {
  CollSpec s;
  s.coll = kAllColls[rng.below(5)];
  s.type = static_cast<ncclDataType_t>(rng.below(ncclNumTypes));
  s.red = kAllReds[rng.below(7)];
  s.count = randomCount(rng, maxCount);
  s.root = static_cast<int>(rng.below(nranks));
  s.inPlace = rng.below(2) == 1;
  s.exact = rng.below(2) == 1;
  s.kind = rng.below(3) == 0 ? BufferKind::Mapped : BufferKind::Plain;
  s.tag = tag;
  return s;
}

bool anyRankOver(World& w, int limit) {
  std::vector<int> counts(w.nranks, 0);
  counts[w.rank] = gFailures.load();
  ncclResult_t r = ncclFerryBootstrapAllGather(w.comm, counts.data(), sizeof(int));
  EXPECT_TRUE(r == ncclSuccess, "bootstrap all-gather of failure counts returned %d", r);
  if (r != ncclSuccess) return true;
  int worst = *std::max_element(counts.begin(), counts.end());
  if (worst > limit && w.rank == 0) {
    printf("stopping: a rank has %d failures (limit %d)\n", worst, limit);
  }
  return worst > limit;
}

void uploadsDone() {
#ifdef FERRY_TEST_CUDA
  // A pageable cudaMemcpy can return before its DMA lands, ordered only on
  // the legacy stream; the library's streams are non-blocking.
  if (onCuda()) (void)cudaDeviceSynchronize();
#endif
}

}  // namespace ferry::test
