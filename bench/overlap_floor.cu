// ferry-overlap-floor: what a bf16 GEMM on one GPU loses to traffic that takes
// no SMs at all, measured with ferry-bench's own GEMM loop (GemmLoop in
// ferry_bench/overlap.h: one unbroken train of GEMMs, each timed, the traffic
// launched in its middle; the GEMMs wholly beside it against those wholly
// before and after). It separates
// the cost of the copy engines themselves (HBM, NVLink, power) from what a
// communication library adds on top (SMs for kernels, one-thread wait
// kernels, staging copies).
//
// Usage: ferry-overlap-floor [bytes] [iters] [gemm GPU, 0 or 1]
// (one process, two GPUs). Each line: the traffic kind, the GEMM's TFLOP/s
// alone and beside it, and the slowdown (alone / beside). The buffers hold
// fresh random words each run: constant data toggles fewer bits in HBM and
// on NVLink, draws less power and would flatter the floor.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "ferry_bench/overlap.h"

namespace {

// Spins one thread for `ns` nanoseconds of the global timer: the shape of a
// one-thread wait kernel, without any flag.
__global__ void spinFor(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Fills `n` words with a hash of (seed, index): random-looking data that
// differs every run (the seed is the clock).
__global__ void fillRandom(unsigned* p, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned long long z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    p[i] = static_cast<unsigned>(z ^ (z >> 31));
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (256u << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  const int me = argc > 3 ? atoi(argv[3]) : 0;  // the GPU that runs the GEMM
  const int peer = 1 - me;
  if (me != 0 && me != 1) {
    fprintf(stderr, "ferry-overlap-floor: the GEMM GPU must be 0 or 1, not %s\n", argv[3]);
    return 2;
  }
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    printf("ferry-overlap-floor needs 2 GPUs (found %d): skipped\n", devices);
    return 77;
  }
  void* buf[2][2];  // [device][src, dst]
  cudaStream_t copy[2], local;
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CHECK(cudaMalloc(&buf[d][0], bytes));
    CHECK(cudaMalloc(&buf[d][1], bytes));
    const unsigned long long seed =
        std::chrono::steady_clock::now().time_since_epoch().count() * 2 + d;
    fillRandom<<<1024, 256>>>(static_cast<unsigned*>(buf[d][0]), bytes / 4, seed);
    fillRandom<<<1024, 256>>>(static_cast<unsigned*>(buf[d][1]), bytes / 4, ~seed);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamCreateWithFlags(&copy[d], cudaStreamNonBlocking));
  }
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceSynchronize());
  }
  // localHi: the same local copies on a stream of the greatest priority
  // (its blocks go first at each of the GEMM's wave ends: the traffic keeps
  // its speed, the GEMM pays; trap 74's other way out).
  // (A stream of the other GPU copying within the GEMM's GPU runs on SMs
  // too: ferry-copy-sm, session 39.)
  cudaStream_t localHi;
  CHECK(cudaSetDevice(me));
  CHECK(cudaStreamCreateWithFlags(&local, cudaStreamNonBlocking));
  int leastPriority = 0, greatestPriority = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority));
  CHECK(cudaStreamCreateWithPriority(&localHi, cudaStreamNonBlocking, greatestPriority));
  using ferry::bench::Backend;
  const ferry::bench::Device gpu0{Backend::Cuda, me, nullptr};
  ferry::bench::GemmLoop g;
  ferry::bench::Stream beside;  // GemmLoop's traffic stream: the kinds' streams join into it
  std::string error;
  double aloneTflops = 0;
  if (!g.init(gpu0, 8192, &error) || !beside.create(gpu0, &error) ||
      !g.measureAlone(&aloneTflops, &error)) {
    fprintf(stderr, "ferry-overlap-floor: %s\n", error.c_str());
    return 1;
  }
  // Bidirectional copy-engine traffic, timed alone to size the GEMM batch.
  auto traffic = [&] {
    for (int i = 0; i < iters; ++i) {
      for (int d = 0; d < 2; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMemcpyPeerAsync(buf[1 - d][1], 1 - d, buf[d][0], d, bytes, copy[d]));
      }
    }
    CHECK(cudaSetDevice(me));
  };
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaEventRecord(t0, copy[me]));
  traffic();
  CHECK(cudaEventRecord(t1, copy[me]));
  CHECK(cudaDeviceSynchronize());
  float trafficMs = 0;
  CHECK(cudaEventElapsedTime(&trafficMs, t0, t1));
  printf(
      "# %zu B x %d each way: %.1f GB/s per direction alone; GEMM 8192^3 bf16 on GPU %d "
      "%.1f TFLOP/s alone\n",
      bytes, iters, bytes * double(iters) / (trafficMs / 1e3) / 1e9, me, aloneTflops);
  unsigned long long window = static_cast<unsigned long long>(trafficMs * 1e6);
  // An all-to-all's data movement: each GPU pushes half of `bytes` to the
  // other, and the GEMM's GPU copies the other half locally on `localStream`, in
  // `pieces` pieces, each after the same share of the GEMM's GPU's push when that is
  // the push's stream (does spreading the HBM-heavy local copy out cost the
  // GEMM less than one burst beside the push?).
  auto allToAll = [&](int pieces, cudaStream_t localStream) {
    const size_t half = bytes / 2;
    const size_t piece = half / static_cast<size_t>(pieces);
    for (int i = 0; i < iters; ++i) {
      CHECK(cudaSetDevice(peer));
      CHECK(cudaMemcpyPeerAsync(buf[me][1], me, buf[peer][0], peer, half, copy[peer]));
      CHECK(cudaSetDevice(me));
      for (int p = 0; p < pieces; ++p) {
        const size_t off = piece * static_cast<size_t>(p);
        CHECK(cudaMemcpyPeerAsync(static_cast<char*>(buf[peer][1]) + off, peer,
                                  static_cast<char*>(buf[me][0]) + off, me, piece, copy[me]));
        CHECK(cudaMemcpyAsync(static_cast<char*>(buf[me][1]) + half + off,
                              static_cast<char*>(buf[me][0]) + half + off, piece,
                              cudaMemcpyDeviceToDevice, localStream));
      }
    }
  };
  constexpr size_t kBatch = ~size_t{0};  // localHalf: cudaMemcpyBatchAsync, compute-overlap hint
  // the GEMM's GPU's local half on `local`: as strided rows of `row` bytes (two 2D
  // copies, even rows then odd rows, so the driver cannot fold them into one
  // contiguous copy), as one plain copy when `row` is 0, or as one batch
  // copy with cudaMemcpyFlagPreferOverlapWithCompute when it is kBatch.
  auto localHalf = [&](size_t row, cudaStream_t on) {
    const size_t half = bytes / 2;
    if (row == kBatch) {  // hinted toward overlap with compute; still SMs (ferry-copy-sm)
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
      void* dsts[1] = {static_cast<char*>(buf[me][1]) + half};
      const void* srcs[1] = {static_cast<char*>(buf[me][0]) + half};
      size_t sizes[1] = {half}, idx[1] = {0};
      CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 1, on));
      return;
    }
    if (row == 0) {
      CHECK(cudaMemcpyAsync(static_cast<char*>(buf[me][1]) + half,
                            static_cast<char*>(buf[me][0]) + half, half, cudaMemcpyDeviceToDevice,
                            on));
      return;
    }
    const size_t rows = half / (2 * row);  // per parity
    constexpr size_t kMaxRows = 65535;     // per 2D copy, to stay inside any height limit
    for (size_t parity = 0; parity < 2; ++parity) {
      for (size_t first = 0; first < rows; first += kMaxRows) {
        const size_t off = half + parity * row + first * 2 * row;
        CHECK(cudaMemcpy2DAsync(static_cast<char*>(buf[me][1]) + off, 2 * row,
                                static_cast<char*>(buf[me][0]) + off, 2 * row, row,
                                std::min(kMaxRows, rows - first), cudaMemcpyDeviceToDevice, on));
      }
    }
  };
  // The all-to-all shape with the local half beside the pushes as rows: does
  // a strided local copy cost the GEMM less than one contiguous burst?
  auto allToAllRows = [&](size_t row, cudaStream_t on) {
    const size_t half = bytes / 2;
    for (int i = 0; i < iters; ++i) {
      CHECK(cudaSetDevice(peer));
      CHECK(cudaMemcpyPeerAsync(buf[me][1], me, buf[peer][0], peer, half, copy[peer]));
      CHECK(cudaSetDevice(me));
      CHECK(cudaMemcpyPeerAsync(buf[peer][1], peer, buf[me][0], me, half, copy[me]));
      localHalf(row, on);
    }
  };
  // The local half through the other GPU: copied out to a scratch buffer
  // there and back, both copies peer copies issued on the GEMM's GPU
  // (copy engines: ferry-copy-sm's "two peer copies"), pipelined over two
  // scratch slots so that the way out and the way back overlap. Zero SMs on
  // either GPU for three times an all-to-all's NVLink bytes (trap 74).
  constexpr size_t kViaChunk = 16u << 20;
  void* scratch[2];
  cudaStream_t viaOut, viaBack;
  cudaEvent_t outDone[2], backDone[2];
  CHECK(cudaSetDevice(peer));
  for (auto& p : scratch) CHECK(cudaMalloc(&p, kViaChunk));
  CHECK(cudaSetDevice(me));
  CHECK(cudaStreamCreateWithFlags(&viaOut, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&viaBack, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaEventCreateWithFlags(&outDone[i], cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&backDone[i], cudaEventDisableTiming));
  }
  auto localViaPeer = [&] {
    const size_t half = bytes / 2;
    char* src = static_cast<char*>(buf[me][0]) + half;
    char* dst = static_cast<char*>(buf[me][1]) + half;
    for (size_t off = 0, c = 0; off < half; off += kViaChunk, ++c) {
      const size_t n = std::min(kViaChunk, half - off);
      const size_t slot = c % 2;
      // The slot's previous way back must have read it before it is refilled.
      if (c >= 2) CHECK(cudaStreamWaitEvent(viaOut, backDone[slot], 0));
      CHECK(cudaMemcpyPeerAsync(scratch[slot], peer, src + off, me, n, viaOut));
      CHECK(cudaEventRecord(outDone[slot], viaOut));
      CHECK(cudaStreamWaitEvent(viaBack, outDone[slot], 0));
      CHECK(cudaMemcpyPeerAsync(dst + off, me, scratch[slot], peer, n, viaBack));
      CHECK(cudaEventRecord(backDone[slot], viaBack));
    }
  };
  auto pushes = [&] {
    CHECK(cudaSetDevice(peer));
    CHECK(cudaMemcpyPeerAsync(buf[me][1], me, buf[peer][0], peer, bytes / 2, copy[peer]));
    CHECK(cudaSetDevice(me));
    CHECK(cudaMemcpyPeerAsync(buf[peer][1], peer, buf[me][0], me, bytes / 2, copy[me]));
  };
  auto allToAllViaPeer = [&](bool withPushes) {
    for (int i = 0; i < iters; ++i) {
      if (withPushes) pushes();
      localViaPeer();
    }
  };
  // The local half alone (no NVLink traffic): its own speed ("alone ms")
  // and what it costs the GEMM, plain and as rows (trap 71's "why").
  auto localOnly = [&](size_t row) {
    CHECK(cudaSetDevice(me));
    for (int i = 0; i < iters; ++i) localHalf(row, local);
  };
  struct Kind {
    const char* name;
    std::function<void()> launch;
  };
  std::vector<Kind> kinds = {
      {"nothing", [] {}},
      {"copy engines, both directions", traffic},
      {"one-thread spin kernel", [&] { spinFor<<<1, 1, 0, local>>>(window); }},
      {"copy engines + spin kernel",
       [&] {
         spinFor<<<1, 1, 0, local>>>(window);
         traffic();
       }},
      {"all-to-all shape: half each way + half local", [&] { allToAll(1, local); }},
      {"all-to-all shape, local after the push", [&] { allToAll(1, copy[me]); }},
      {"all-to-all shape, local in 8 pieces", [&] { allToAll(8, copy[me]); }},
      {"all-to-all shape, local beside as 4 KiB rows", [&] { allToAllRows(4096, local); }},
      {"all-to-all shape, local beside as 256 B rows", [&] { allToAllRows(256, local); }},
      {"all-to-all shape, local 4 KiB rows, high priority", [&] { allToAllRows(4096, localHi); }},
      {"all-to-all shape, pushes only (no local half)",
       [&] {
         for (int i = 0; i < iters; ++i) pushes();
       }},
      {"all-to-all shape, local half through the other GPU", [&] { allToAllViaPeer(true); }},
      {"local half alone, through the other GPU", [&] { allToAllViaPeer(false); }},
      {"local half alone, one copy", [&] { localOnly(0); }},
      {"local half alone, hinted batch copy", [&] { localOnly(kBatch); }},
      {"local half alone, as 4 KiB rows", [&] { localOnly(4096); }},
      {"local half alone, as 256 B rows", [&] { localOnly(256); }},
      {"copy engines + local staging copy",
       [&] {
         for (int i = 0; i < iters; ++i) {
           CHECK(cudaMemcpyAsync(buf[me][1], buf[me][0], bytes, cudaMemcpyDeviceToDevice, local));
         }
         traffic();
       }},
  };
  // GemmLoop counts the GEMMs that run while its traffic stream is busy: the
  // kinds' streams (both GPUs' copy streams, `local`, `localHi`, `viaOut`,
  // `viaBack`) join into it.
  constexpr int kJoins = 6;
  const cudaStream_t joinFrom[kJoins] = {copy[0], copy[1], local, localHi, viaOut, viaBack};
  const int joinDevice[kJoins] = {0, 1, me, me, me, me};
  cudaEvent_t joined[kJoins];
  for (int i = 0; i < kJoins; ++i) {
    CHECK(cudaSetDevice(joinDevice[i]));
    CHECK(cudaEventCreateWithFlags(&joined[i], cudaEventDisableTiming));
  }
  CHECK(cudaSetDevice(me));
  auto joinInto = [&](cudaStream_t into) {
    for (int i = 0; i < kJoins; ++i) {
      CHECK(cudaSetDevice(joinDevice[i]));
      CHECK(cudaEventRecord(joined[i], joinFrom[i]));
      CHECK(cudaSetDevice(me));
      CHECK(cudaStreamWaitEvent(into, joined[i], 0));
    }
  };
  // Waits for both GPUs, then makes the GEMM's GPU current again (the spin
  // kernels launch on its stream `local`).
  auto syncBoth = [&] {
    for (int d = 0; d < 2; ++d) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaSetDevice(me));
  };
  // Each kind's own duration with nothing beside it (both GPUs idle after):
  // what the shape costs the traffic, beside what it costs the GEMM.
  std::vector<double> aloneMs(kinds.size());
  for (size_t k = 0; k < kinds.size(); ++k) {
    for (int rep = 0; rep < 2; ++rep) {  // the first is a warm-up
      auto start = std::chrono::steady_clock::now();
      kinds[k].launch();
      syncBoth();
      aloneMs[k] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
    }
  }
  // Rounds over every kind in turn, so clock and temperature drift hits all
  // kinds alike. Each sample's reference is the same GEMMs alone right before
  // and after it in one unbroken train (GemmLoop); a kind's slowdown is the
  // median of its samples' alone / beside. "vs nothing" compares with the
  // median of the kind that launches nothing instead.
  constexpr int kRounds = 7;
  std::vector<std::vector<double>> tflops(kinds.size()), ratios(kinds.size()),
      besideMs(kinds.size());
  for (int r = 0; r < kRounds; ++r) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      ferry::bench::OverlapSample sample;
      auto launch = [&](std::string*) {
        kinds[k].launch();
        joinInto(beside.get());
        return true;
      };
      if (!g.measureUnderTraffic(beside, 1, trafficMs / 1e3, launch, &sample, &error)) {
        fprintf(stderr, "ferry-overlap-floor: %s\n", error.c_str());
        return 1;
      }
      syncBoth();  // the kind's copies on other streams, both GPUs
      tflops[k].push_back(sample.gemmTflopsUnder);
      ratios[k].push_back(sample.gemmTflopsAlone / sample.gemmTflopsUnder);
      besideMs[k].push_back(sample.trafficSecondsPerIter * 1e3);  // iters = 1: the whole kind
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(tflops[0]);
  printf(
      "# %d rounds, medians; slowdown = GEMM alone (the same GEMMs right before and after) / "
      "GEMM beside\n",
      kRounds);
  // "alone ms" / "beside ms": the kind's own duration with the GEMMs idle,
  // and beside them (what the GEMM costs the traffic: a copy within one GPU
  // runs on SMs and waits for the GEMM's waves, trap 74).
  printf("# %-44s %10s %9s %11s %9s %9s %9s\n", "beside the GEMM", "beside", "slowdown", "min..max",
         "vs nothing", "alone ms", "beside ms");
  for (size_t k = 0; k < kinds.size(); ++k) {
    const double m = median(tflops[k]);
    const auto [lo, hi] = std::minmax_element(ratios[k].begin(), ratios[k].end());
    printf("  %-44s %10.1f %9.3f %5.3f..%5.3f %9.3f %9.2f %9.2f\n", kinds[k].name, m,
           median(ratios[k]), *lo, *hi, base / m, aloneMs[k], median(besideMs[k]));
  }
  return 0;
}
