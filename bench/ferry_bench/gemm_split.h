// How --overlap reads a train of back-to-back GEMMs (overlap.h): which GEMMs
// ran beside the traffic and which alone. Pure, so the unit tests cover it.
#pragma once

#include <cstddef>
#include <vector>

namespace ferry::bench {

// Mean duration of the GEMMs wholly inside the traffic's span [from, to]
// (beside) and of those wholly outside it (alone); a GEMM that straddles an
// edge counts for neither. Traffic shorter than one GEMM has none wholly
// inside it: then those it touches count as beside.
struct GemmSplit {
  double besideMs = 0, aloneMs = 0;
  int beside = 0, alone = 0;
};

// `boundsMs[k]` is when GEMM k started and GEMM k-1 ended (one unbroken
// train, so GEMM k runs from boundsMs[k] to boundsMs[k + 1]); the GEMMs
// before `first` (the warm-up) count for neither.
GemmSplit splitGemms(const std::vector<double>& boundsMs, size_t first, double from, double to);

}  // namespace ferry::bench
