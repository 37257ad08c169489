// --overlap: a cuBLAS bf16 GEMM loop (M=N=K=size, fp32 accumulation) on its
// own non-blocking stream of the traffic's GPU, to measure how much the
// collective or p2p traffic slows the GEMM and the GEMM slows the traffic.
// CUDA only: without FERRY_BENCH_CUDA, init() fails with a reason.
//
// One GemmLoop per device, used by the thread that created it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ferry_bench/device.h"

namespace ferry::bench {

// One measurement of a GEMM loop beside traffic.
struct OverlapSample {
  double trafficSecondsPerIter = 0;
  double gemmTflopsAlone = 0;         // the GEMMs just before and after the traffic
  double gemmTflopsUnder = 0;         // the GEMMs that ran wholly beside it
  std::vector<double> rankSlowdowns;  // every rank's (runner.cc worstRankSample)
};

class GemmLoop {
 public:
  GemmLoop();
  ~GemmLoop();
  GemmLoop(const GemmLoop&) = delete;
  GemmLoop& operator=(const GemmLoop&) = delete;

  bool init(const Device& device, size_t n, std::string* error);
  // TFLOP/s of back-to-back GEMMs with nothing else running.
  bool measureAlone(double* tflops, std::string* error);
  // Runs `launchTraffic` `iters` times on `traffic` in the middle of one
  // unbroken train of individually timed GEMMs (a warm-up, about as many as
  // cover the traffic's solo duration, trafficAloneSeconds, before it, more
  // kept queued until it has ended, as many again after it): the GEMMs
  // wholly inside the traffic's span on `traffic` against those wholly
  // outside it, so power and clock drift cancels out and the GPU never
  // idles between the two. Work the launch puts on other streams must be
  // joined into `traffic` to count. `lineUp`, if given, runs right before
  // the traffic: ranks whose GPUs reached it at different times start the
  // traffic together.
  bool measureUnderTraffic(const Stream& traffic, int iters, double trafficAloneSeconds,
                           const std::function<bool(std::string*)>& launchTraffic,
                           OverlapSample* sample, std::string* error,
                           const std::function<void()>& lineUp = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::bench
