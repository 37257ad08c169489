#include "ferry_bench/gemm_split.h"

namespace ferry::bench {

GemmSplit splitGemms(const std::vector<double>& boundsMs, size_t first, double from, double to) {
  GemmSplit s;
  for (int pass = 0; pass < 2 && s.beside == 0; ++pass) {
    s = GemmSplit{};
    for (size_t k = first; k + 1 < boundsMs.size(); ++k) {
      const double a = boundsMs[k], b = boundsMs[k + 1];
      const bool inside = pass == 0 ? a >= from && b <= to : b > from && a < to;
      if (inside) {
        s.besideMs += b - a, ++s.beside;
      } else if (b <= from || a >= to) {
        s.aloneMs += b - a, ++s.alone;
      }
    }
  }
  if (s.beside > 0) s.besideMs /= s.beside;
  if (s.alone > 0) s.aloneMs /= s.alone;
  return s;
}

}  // namespace ferry::bench
