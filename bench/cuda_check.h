// CHECK(call): for the standalone CUDA probes under bench/ (one process, no
// error recovery): prints where a CUDA runtime call failed and exits 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

// CU_CHECK(call): the same for a CUDA driver call (the file using it
// includes cuda.h).
#define CU_CHECK(call)                                                                    \
  do {                                                                                    \
    CUresult r_ = (call);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #call, static_cast<int>(r_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
