// Re-emits a rank's output stream line by line with a "[<rank>] " prefix.
//
// Only whole lines are written, each prefixed line in one contiguous write
// sequence to the launcher's own stdout/stderr, and the launcher is the only
// writer there, so lines from different ranks never interleave mid-line. A
// final line without a newline is emitted (with one) by finish(). A line
// longer than kMaxLine is cut into kMaxLine pieces, each emitted as a line, so
// a rank that never writes a newline cannot grow the launcher without bound.
//
// Threading: one thread (the launcher's poll loop) uses a LineRelay.
#pragma once

#include <cstddef>
#include <string>

namespace ferry::run {

class LineRelay {
 public:
  static constexpr size_t kMaxLine = 1 << 20;

  LineRelay(int outFd, int rank);

  // Appends `n` bytes of the rank's output; writes every completed line.
  void feed(const char* data, size_t n);
  // Writes the pending partial line, if any, followed by a newline.
  void finish();

 private:
  void appendLine(std::string* batch, const char* line, size_t n) const;

  int outFd_;
  std::string prefix_;
  std::string pending_;  // bytes after the last newline seen
};

// write() until done; false on an error other than EINTR (e.g. EPIPE).
bool writeAll(int fd, const char* data, size_t n);

}  // namespace ferry::run
