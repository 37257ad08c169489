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
  double gemmTflopsAlone = 0;         // mean of the GEMMs alone just before and after
  double gemmTflopsUnder = 0;         // the same GEMMs beside the traffic
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
  // Runs `launchTraffic` `iters` times on `traffic` while GEMMs run beside it
  // (as many as cover the traffic's solo duration, trafficAloneSeconds), and
  // the same number of GEMMs alone right before and after (their mean is the
  // sample's reference, so power and clock drift cancels out). `lineUp`, if
  // given, runs between the GEMMs before and the shared window: ranks whose
  // GPUs finished those at different times start the traffic together.
  bool measureUnderTraffic(const Stream& traffic, int iters, double trafficAloneSeconds,
                           const std::function<bool(std::string*)>& launchTraffic,
                           OverlapSample* sample, std::string* error,
                           const std::function<void()>& lineUp = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::bench
