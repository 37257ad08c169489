// UniqueFd: sole owner of a POSIX file descriptor (sockets, memfds, pipes).
//
// Move-only; the descriptor is closed when the owner is destroyed or reset.
// close() errors are ignored on purpose: by then the descriptor is released
// either way (Linux frees it even on EINTR) and retrying could close a number
// another thread has just been given.
//
// Threading: a UniqueFd is a plain value; guard it like any other member.
#pragma once

#include <unistd.h>

#include <utility>

namespace ferry {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing; the caller now owns the descriptor.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }

  // Closes the current descriptor (if any) and takes ownership of `fd`.
  void reset(int fd = -1) {
    int old = std::exchange(fd_, fd);
    if (old >= 0 && old != fd) ::close(old);
  }

 private:
  int fd_ = -1;
};

}  // namespace ferry
