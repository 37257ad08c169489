// Running one collective of a test through the public API: buffers laid out
// by NCCL's in-place conventions, inputs uploaded, outputs poisoned, the
// PreMulSum operator created and destroyed, the call issued, and the result
// checked against CollData's reference. Shared by the cases of mp_coll.
//
// Threading: a CollRun belongs to one thread. Lifetime: the World and the
// communicator passed to prepare/post/releaseOp outlive the run; the run's
// buffers live until it is destroyed, so destroy it only after the stream
// that ran the collective has been synchronized.
#pragma once

#include <cstdint>
#include <memory>

#include "coll_ref.h"
#include "common/buffers.h"
#include "common/random.h"
#include "nccl.h"
#include "p2p_util.h"

namespace ferry::test {

// A device-resident PreMulSum operator shared by several runs (one after the
// other): each run stores its own scalar in `scalar` before it posts, which
// tests that the scalar is read when the collective runs.
struct SharedScalarOp {
  ncclRedOp_t op = ncclSum;
  TestBuffer* scalar = nullptr;
};

class CollRun {
 public:
  CollRun(const World& w, const CollSpec& spec);
  CollRun(const CollRun&) = delete;
  CollRun& operator=(const CollRun&) = delete;

  // Allocates, uploads this rank's input, poisons the output and sets up the
  // operator (created on `comm`, or the shared one loaded with this rank's
  // scalar). False, with a failure counted, if any of it failed.
  bool prepare(ncclComm_t comm, const SharedScalarOp* shared = nullptr);
  // Issues the collective; a failure is counted and reported with the spec.
  bool post(ncclComm_t comm, cudaStream_t stream);
  // Destroys the operator prepare created (no-op otherwise). NCCL allows it
  // as soon as the call that used the operator has returned.
  void releaseOp(ncclComm_t comm);
  // After the stream is synchronized: compares the output with the reference
  // and, out of place, checks the send buffer was left alone. Returns false
  // (one failure counted) if anything differs; skipped if post failed.
  bool verify();

  const CollSpec& spec() const { return spec_; }

 private:
  void layOut();
  void fill();
  bool setUpOp(ncclComm_t comm, const SharedScalarOp* shared);
  bool checkInputIntact();

  const World& world_;
  CollSpec spec_;
  CollData data_;
  size_t elemSize_;
  std::unique_ptr<TestBuffer> send_, recv_, scalar_;
  char* sendPtr_ = nullptr;
  char* recvPtr_ = nullptr;
  TestBuffer* outBuf_ = nullptr;  // holds this rank's output (null: nothing to check)
  size_t outOffset_ = 0;          // bytes into outBuf_
  ncclRedOp_t op_ = ncclSum;
  bool ownsOp_ = false;
  bool posted_ = false;
  uint64_t hostScalar_ = 0;
};

// Collectives whose results verify() compared (output or input checks),
// for the summary line of each case.
uint64_t verifiedCount();

// A random collective: any type, operator (PreMulSum included), root,
// placement and buffer kind; counts from 0 to maxCount, skewed to small.
CollSpec randomSpec(Rng& rng, int nranks, size_t maxCount, uint64_t tag);
// 0 .. maxCount, skewed to small values (log-uniform-ish, with 0 and tiny
// counts frequent).
size_t randomCount(Rng& rng, size_t maxCount);

// Every rank must call it at the same point: true on all ranks when any rank
// has counted more than `limit` failures (so all stop together, not hang).
bool anyRankOver(World& w, int limit);

// CUDA: waits for the synchronous copies into buffers (issued on the legacy
// stream) to land before work on the library's non-blocking streams starts.
// Host runtime: nothing to wait for.
void uploadsDone();

}  // namespace ferry::test
