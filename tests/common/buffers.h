// Communication buffers for test programs, on whichever runtime the library
// runs (host memory on the host runtime, GPU memory on CUDA), in two kinds:
//   Plain:  memory another process cannot map (host: malloc; CUDA: the
//           stream-ordered pool), so receives into it take the FIFO path;
//   Mapped: ncclMemAlloc memory, so receives into it are zero-copy.
// upload/download move bytes between host vectors and the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nccl.h"

namespace ferry::test {

enum class BufferKind { Plain, Mapped };

class TestBuffer {
 public:
  TestBuffer(size_t bytes, BufferKind kind);
  ~TestBuffer();
  TestBuffer(const TestBuffer&) = delete;
  TestBuffer& operator=(const TestBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  bool ok() const { return ptr_ != nullptr || bytes_ == 0; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;

 private:
  size_t bytes_;
  BufferKind kind_;
  void* ptr_ = nullptr;
};

// True when the library runs on the CUDA runtime (asks ncclFerryGetRuntime).
bool onCuda();

}  // namespace ferry::test
