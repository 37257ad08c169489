// ferry-bench's output: nccl-tests' columns for one library, the side-by-side
// table of two (busbw and time ratios per size), and the --json document.
// Pure formatting of RunResult values.
#pragma once

#include <cstdio>
#include <string>

#include "ferry_bench/results.h"

namespace ferry::bench {

// Header + one line per size for each op of `run`; "# <op>: not supported by
// <lib> (<error>)" for ops the library refused.
void printRun(FILE* out, const RunResult& run, bool overlap);

// Rows of `a` and `b` matched by op and size; ratios are a/b (busbw) and
// a/b (time): busbw ratio > 1 and time ratio < 1 mean `a` is faster.
void printComparison(FILE* out, const RunResult& a, const RunResult& b);

// {"tool":"ferry-bench","runs":[...],"comparison":[...]} (`b` may be null).
std::string resultsJson(const RunResult& a, const RunResult* b);

// Ratio x/y, 0 when y is 0 (printed as N/A).
double ratio(double x, double y);

}  // namespace ferry::bench
