#include "ferry_bench/overlap.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ferry_bench/gemm_split.h"

#ifdef FERRY_BENCH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace ferry::bench {

#ifdef FERRY_BENCH_CUDA
namespace {

bool cudaOk(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

bool cublasOk(cublasStatus_t s, const char* what, std::string* error) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  *error = std::string(what) + " failed with cuBLAS status " + std::to_string(static_cast<int>(s));
  return false;
}

// Random bf16 values in (-1, 1): random sign and mantissa, exponents 2^-8..2^-1,
// so K products sum far below bf16's range.
bool fillRandomBf16(DeviceBuffer& buf, size_t count, uint64_t salt, std::string* error) {
  std::vector<uint16_t> host(count);
  uint64_t x = 0x9e3779b97f4a7c15ull * (salt + 1);
  for (uint16_t& h : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    const uint16_t exponent = static_cast<uint16_t>(119 + (x >> 8) % 8);
    h = static_cast<uint16_t>(((x >> 20) & 0x8000) | (exponent << 7) | (x & 0x7f));
  }
  return buf.upload(0, host.data(), count * sizeof(uint16_t), error);
}

// Event pair on one stream; freed with the object.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~EventPair() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  bool init(std::string* error) {
    return cudaOk(cudaEventCreate(&start), "cudaEventCreate", error) &&
           cudaOk(cudaEventCreate(&stop), "cudaEventCreate", error);
  }
  double seconds() const {
    float ms = 0;
    return cudaEventElapsedTime(&ms, start, stop) == cudaSuccess ? ms / 1e3 : 0;
  }
};

// Timestamps between back-to-back GEMMs on one stream: event k marks the
// start of GEMM k and the end of GEMM k-1. Freed with the object.
struct EventTrain {
  std::vector<cudaEvent_t> events;
  ~EventTrain() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  bool mark(cudaStream_t s, std::string* error) {
    cudaEvent_t e = nullptr;
    if (!cudaOk(cudaEventCreate(&e), "cudaEventCreate", error)) return false;
    events.push_back(e);
    return cudaOk(cudaEventRecord(e, s), "cudaEventRecord", error);
  }
  int gemms() const { return static_cast<int>(events.size()) - 1; }
  // Whether GEMM k has started (event k reached; an error reads as not yet:
  // the caller's own query of the traffic's end reports it).
  bool started(int k) const { return cudaEventQuery(events[k]) == cudaSuccess; }
  // Milliseconds from event 0 to `e` (both completed).
  double at(cudaEvent_t e) const {
    float ms = 0;
    return cudaEventElapsedTime(&ms, events[0], e) == cudaSuccess ? ms : 0;
  }
  std::vector<double> bounds() const {
    std::vector<double> ms;
    for (cudaEvent_t e : events) ms.push_back(at(e));
    return ms;
  }
};

}  // namespace

struct GemmLoop::Impl {
  Device device;
  size_t n = 0;
  Stream stream;
  DeviceBuffer a, b, c;
  cublasHandle_t handle = nullptr;
  double secondsPerGemm = 0;

  ~Impl() {
    if (handle != nullptr) cublasDestroy(handle);
  }
  double flops() const { return 2.0 * static_cast<double>(n) * n * n; }
  // Seconds of `count` back-to-back GEMMs with nothing else of ours running.
  bool timeGemms(int count, double* seconds, std::string* error);
  // Queues `count` more GEMMs on the train, each followed by its event.
  bool extend(EventTrain* train, int count, std::string* error);

  bool enqueue(int count, std::string* error) {
    const float alpha = 1.0f, beta = 0.0f;
    const int dim = static_cast<int>(n);
    for (int i = 0; i < count; ++i) {
      if (!cublasOk(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, a.data(),
                                 CUDA_R_16BF, dim, b.data(), CUDA_R_16BF, dim, &beta, c.data(),
                                 CUDA_R_16BF, dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx", error)) {
        return false;
      }
    }
    return true;
  }
};

GemmLoop::GemmLoop() = default;
GemmLoop::~GemmLoop() = default;

bool GemmLoop::init(const Device& device, size_t n, std::string* error) {
  if (device.backend != Backend::Cuda) {
    *error = "--overlap needs the CUDA runtime (cuBLAS GEMM on a GPU)";
    return false;
  }
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->n = n;
  const size_t bytes = n * n * 2;  // bf16
  if (!impl->stream.create(device, error) || !impl->a.allocate(device, bytes, error) ||
      !impl->b.allocate(device, bytes, error) || !impl->c.allocate(device, bytes, error)) {
    return false;
  }
  // Random inputs: constant data draws less power and runs the GEMM faster
  // than real work would.
  if (!fillRandomBf16(impl->a, n * n, 1, error) || !fillRandomBf16(impl->b, n * n, 2, error) ||
      !cublasOk(cublasCreate(&impl->handle), "cublasCreate", error) ||
      !cublasOk(cublasSetStream(impl->handle, impl->stream.get()), "cublasSetStream", error)) {
    return false;
  }
  impl_ = std::move(impl);
  return true;
}

bool GemmLoop::measureAlone(double* tflops, std::string* error) {
  constexpr int kWarmup = 3, kTimed = 10;
  double warmup = 0, timed = 0;
  if (!impl_->timeGemms(kWarmup, &warmup, error) || !impl_->timeGemms(kTimed, &timed, error)) {
    return false;
  }
  impl_->secondsPerGemm = timed / kTimed;
  *tflops = impl_->secondsPerGemm > 0 ? impl_->flops() / impl_->secondsPerGemm / 1e12 : 0;
  return true;
}

bool GemmLoop::Impl::timeGemms(int count, double* seconds, std::string* error) {
  EventPair ev;
  if (!device.select(error) || !ev.init(error) ||
      !cudaOk(cudaEventRecord(ev.start, stream.get()), "cudaEventRecord", error) ||
      !enqueue(count, error) ||
      !cudaOk(cudaEventRecord(ev.stop, stream.get()), "cudaEventRecord", error) ||
      !stream.synchronize(error)) {
    return false;
  }
  *seconds = ev.seconds();
  return true;
}

bool GemmLoop::Impl::extend(EventTrain* train, int count, std::string* error) {
  if (train->events.empty() && !train->mark(stream.get(), error)) return false;
  for (int k = 0; k < count; ++k) {
    if (!enqueue(1, error) || !train->mark(stream.get(), error)) return false;
  }
  return true;
}

bool GemmLoop::measureUnderTraffic(const Stream& traffic, int iters, double trafficAloneSeconds,
                                   const std::function<bool(std::string*)>& launchTraffic,
                                   OverlapSample* sample, std::string* error,
                                   const std::function<void()>& lineUp) {
  double unused = 0;
  if (impl_->secondsPerGemm <= 0 && !measureAlone(&unused, error)) return false;
  // Enough GEMMs to cover the traffic's solo time, so each measures the other
  // under load.
  const double cover = iters * trafficAloneSeconds / impl_->secondsPerGemm;
  const int gemms = static_cast<int>(std::clamp(std::ceil(cover), 2.0, 2000.0));
  // One unbroken train of individually timed GEMMs: 150 ms or more to warm
  // up (a GPU running GEMMs back to back slows down as it reaches its power
  // limit: ~795 TFLOP/s for the first 10 on 2x H200, ~625 sustained),
  // `gemms` alone before the traffic, `gemms` more queued for its solo
  // time, then GEMMs kept queued until the traffic has ended (beside a GEMM it can take several
  // times its solo time), then `gemms` alone after it. The GPU never idles, so its power state
  // holds steady; the GEMMs wholly inside the traffic's span are the sample, those wholly outside
  // it the reference. (Session 38: the older method, separate bursts around a CPU barrier, read
  // x0.986-x1.033 with nothing beside the GEMM; this one x0.992-x1.004.)
  constexpr double kWarmSeconds = 0.15;
  const int warm = std::max(gemms, static_cast<int>(kWarmSeconds / impl_->secondsPerGemm));
  const int ahead = std::max(2, gemms / 2);  // GEMMs kept queued beside the traffic
  EventTrain train;
  EventPair t;
  if (!impl_->device.select(error) || !t.init(error) ||
      !impl_->extend(&train, warm + 2 * gemms, error)) {
    return false;
  }
  // The traffic starts once the GEMMs alone before it have run; the spin
  // keeps the start prompt (a blocking sync can sleep for a scheduler tick).
  cudaError_t q;
  while ((q = cudaEventQuery(train.events[warm + gemms])) == cudaErrorNotReady) {
  }
  if (!cudaOk(q, "cudaEventQuery", error)) return false;
  if (lineUp) lineUp();
  if (!impl_->device.select(error) ||
      !cudaOk(cudaEventRecord(t.start, traffic.get()), "cudaEventRecord", error)) {
    return false;
  }
  for (int i = 0; i < iters; ++i) {
    if (!launchTraffic(error)) return false;
  }
  if (!impl_->device.select(error) ||
      !cudaOk(cudaEventRecord(t.stop, traffic.get()), "cudaEventRecord", error)) {
    return false;
  }
  // Beside the traffic: `ahead` GEMMs stay queued until it has ended (the
  // spin sees the end within one GEMM). A cap keeps a traffic that never
  // ends from growing the train forever (the synchronize below then waits
  // as it would without GEMMs).
  const int cap = warm + 100 * gemms + 1000;
  while ((q = cudaEventQuery(t.stop)) == cudaErrorNotReady && train.gemms() < cap) {
    if (train.started(train.gemms() - ahead) && !impl_->extend(&train, ahead, error)) return false;
  }
  if (!cudaOk(q == cudaErrorNotReady ? cudaSuccess : q, "cudaEventQuery", error)) return false;
  // Then GEMMs alone after it; the first `gemms` of them also fill the solo
  // span of a control that launched nothing (ferry-bench --overlap-nothing),
  // whose span counts as at least the traffic's solo time below.
  if (!impl_->extend(&train, 2 * gemms, error) || !impl_->stream.synchronize(error) ||
      !traffic.synchronize(error)) {
    return false;
  }
  const double from = train.at(t.start);
  const double to = std::max(train.at(t.stop), from + iters * trafficAloneSeconds * 1e3);
  const GemmSplit s = splitGemms(train.bounds(), static_cast<size_t>(warm), from, to);
  if (s.beside == 0 || s.alone == 0) {
    *error = "the GEMM train did not cover the traffic (" + std::to_string(s.beside) +
             " GEMMs beside it, " + std::to_string(s.alone) + " alone)";
    return false;
  }
  sample->trafficSecondsPerIter = (train.at(t.stop) - from) / 1e3 / iters;
  sample->gemmTflopsAlone = impl_->flops() / (s.aloneMs / 1e3) / 1e12;
  sample->gemmTflopsUnder = impl_->flops() / (s.besideMs / 1e3) / 1e12;
  return true;
}

#else  // !FERRY_BENCH_CUDA

struct GemmLoop::Impl {};
GemmLoop::GemmLoop() = default;
GemmLoop::~GemmLoop() = default;

bool GemmLoop::init(const Device&, size_t, std::string* error) {
  *error = "--overlap needs a CUDA build of ferry-bench (cuBLAS)";
  return false;
}
bool GemmLoop::measureAlone(double*, std::string* error) {
  *error = "no GEMM";
  return false;
}
bool GemmLoop::measureUnderTraffic(const Stream&, int, double,
                                   const std::function<bool(std::string*)>&, OverlapSample*,
                                   std::string* error, const std::function<void()>&) {
  *error = "no GEMM";
  return false;
}

#endif

}  // namespace ferry::bench
