#include "relay.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry::run {

bool writeAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

LineRelay::LineRelay(int outFd, int rank)
    : outFd_(outFd), prefix_("[" + std::to_string(rank) + "] ") {}

void LineRelay::appendLine(std::string* batch, const char* line, size_t n) const {
  batch->append(prefix_);
  batch->append(line, n);
  batch->push_back('\n');
}

void LineRelay::feed(const char* data, size_t n) {
  // All complete lines of this chunk go out in one batch (one write in the
  // common case); a write error (closed stdout) drops output, it is not fatal.
  std::string batch;
  const char* end = data + n;
  while (data < end) {
    const char* nl = static_cast<const char*>(memchr(data, '\n', static_cast<size_t>(end - data)));
    if (nl == nullptr) {
      pending_.append(data, static_cast<size_t>(end - data));
      while (pending_.size() >= kMaxLine) {
        appendLine(&batch, pending_.data(), kMaxLine);
        pending_.erase(0, kMaxLine);
      }
      break;
    }
    if (pending_.empty()) {
      appendLine(&batch, data, static_cast<size_t>(nl - data));
    } else {
      pending_.append(data, static_cast<size_t>(nl - data));
      appendLine(&batch, pending_.data(), pending_.size());
      pending_.clear();
    }
    data = nl + 1;
  }
  if (!batch.empty()) (void)writeAll(outFd_, batch.data(), batch.size());
}

void LineRelay::finish() {
  if (pending_.empty()) return;
  std::string batch;
  appendLine(&batch, pending_.data(), pending_.size());
  pending_.clear();
  (void)writeAll(outFd_, batch.data(), batch.size());
}

}  // namespace ferry::run
