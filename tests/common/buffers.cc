#include "common/buffers.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ferry.h"

#ifdef FERRY_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace ferry::test {

bool onCuda() {
  ncclFerryRuntime_t kind = ncclFerryRuntimeHost;
  return ncclFerryGetRuntime(&kind) == ncclSuccess && kind == ncclFerryRuntimeCuda;
}

TestBuffer::TestBuffer(size_t bytes, BufferKind kind) : bytes_(bytes), kind_(kind) {
  size_t n = bytes == 0 ? 1 : bytes;  // a real pointer even for empty messages
  if (kind == BufferKind::Mapped) {
    if (ncclMemAlloc(&ptr_, n) != ncclSuccess) ptr_ = nullptr;
    return;
  }
#ifdef FERRY_TEST_CUDA
  if (onCuda()) {
    // The pool allocator's memory cannot be opened with legacy IPC.
    if (cudaMallocAsync(&ptr_, n, nullptr) != cudaSuccess ||
        cudaStreamSynchronize(nullptr) != cudaSuccess) {
      ptr_ = nullptr;
    }
    return;
  }
#endif
  ptr_ = aligned_alloc(64, (n + 63) / 64 * 64);
}

TestBuffer::~TestBuffer() {
  if (ptr_ == nullptr) return;
  if (kind_ == BufferKind::Mapped) {
    (void)ncclMemFree(ptr_);
    return;
  }
#ifdef FERRY_TEST_CUDA
  if (onCuda()) {
    (void)cudaFreeAsync(ptr_, nullptr);
    (void)cudaStreamSynchronize(nullptr);
    return;
  }
#endif
  free(ptr_);
}

void TestBuffer::upload(const void* host, size_t bytes, size_t offset) {
#ifdef FERRY_TEST_CUDA
  if (onCuda()) {
    // cudaMemcpy from pageable memory may return once the bytes are in the
    // driver's staging buffers, before the last DMA lands; a test stream made
    // non-blocking would then read stale bytes. Sync the legacy stream that
    // carried the copy (seen on 2x H200: a 3 MiB+ send lost its tail).
    if (cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyDefault) !=
            cudaSuccess ||
        cudaStreamSynchronize(nullptr) != cudaSuccess) {
      fprintf(stderr, "upload failed\n");
      abort();
    }
    return;
  }
#endif
  memcpy(static_cast<char*>(ptr_) + offset, host, bytes);
}

void TestBuffer::download(void* host, size_t bytes, size_t offset) const {
#ifdef FERRY_TEST_CUDA
  if (onCuda()) {
    if (cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDefault) !=
        cudaSuccess) {
      fprintf(stderr, "download failed\n");
      abort();
    }
    return;
  }
#endif
  memcpy(host, static_cast<const char*>(ptr_) + offset, bytes);
}

}  // namespace ferry::test
