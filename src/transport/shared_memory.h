// A region of host memory shared between the processes of one host: memfd
// backed, mapped MAP_SHARED. The creator hands the fd to peers (proxy RPC,
// SCM_RIGHTS); nothing is ever left behind in /dev/shm, and the memory goes
// away when the last process unmaps it (even if a process crashes).
//
// Lifetime: the mapping lives as long as the object. Threading: immutable
// after creation; the bytes themselves are shared state whose ordering rules
// belong to the layout placed in them (see ctrl_block.h).
#pragma once

#include <cstddef>
#include <memory>

#include "core/fd.h"
#include "core/status.h"

namespace ferry {

class SharedRegion {
 public:
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // Creates a zero-filled region of `bytes` bytes (rounded up to pages).
  [[nodiscard]] static Status create(size_t bytes, const char* name,
                                     std::unique_ptr<SharedRegion>* out);
  // Maps a region created elsewhere; takes ownership of `fd`.
  [[nodiscard]] static Status attach(UniqueFd fd, size_t bytes, std::unique_ptr<SharedRegion>* out);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  SharedRegion(UniqueFd fd, void* data, size_t size)
      : fd_(std::move(fd)), data_(data), size_(size) {}
  UniqueFd fd_;
  void* data_;
  size_t size_;
};

}  // namespace ferry
