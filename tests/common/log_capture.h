// The logger sent to a fresh file under /tmp for one scope, for tests that
// check what it prints: NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE set
// and the logger reloaded on entry; the environment restored, the logger
// reloaded and the file removed on exit.
//
// Threading: the environment is process-wide; one capture at a time.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "common/env_guard.h"
#include "core/log.h"

namespace ferry::test {

// The whole file, or "" when it cannot be read.
inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class LogCapture {
 public:
  LogCapture(const char* level, const char* subsys) {
    const int fd = mkstemp(path_);
    if (fd < 0) return;
    close(fd);
    file_.emplace("NCCL_DEBUG_FILE", path_);
    level_.emplace("NCCL_DEBUG", level);
    subsys_.emplace("NCCL_DEBUG_SUBSYS", subsys);
    reloadLogConfig();
  }
  ~LogCapture() {
    if (!ok()) return;
    subsys_.reset();
    level_.reset();
    file_.reset();
    reloadLogConfig();  // after the environment is back, so the file is closed
    unlink(path_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  bool ok() const { return file_.has_value(); }
  // Every line so far (the logger flushes each one).
  std::string text() const { return readFile(path_); }

 private:
  char path_[32] = "/tmp/ferry-log-XXXXXX";
  std::optional<EnvGuard> file_, level_, subsys_;
};

}  // namespace ferry::test
