#include "core/log.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <strings.h>

#include "core/env.h"

namespace ferry {
namespace {

thread_local int tlsRank = -1;

struct LoggerState {
  std::mutex mu;
  // What logEnabled reads without the mutex (it runs on every log site of
  // the enqueue path, and the proxy and liveness threads log too): the
  // level, -1 until loaded, and the subsystem mask. Written under mu by
  // loadLocked: the mask first, then the level (release); a reader's acquire
  // load of the level sees the mask that goes with it.
  std::atomic<int> level{-1};
  std::atomic<uint32_t> subsysMask{0};
  bool loaded = false;
  LogConfig config;
  FILE* out = nullptr;  // owned when config.file is set
  std::string lastWarn;
  char host[64] = {0};
};

LoggerState& state();

// A fork() child gets a copy of the logger's mutex in whatever state it had in
// the parent; if another thread was logging at that instant the child would
// block forever in its first log call. Prepare takes the mutex, so the child
// is forked with it held by the forking thread and releases it itself.
void installForkHandlers() {
  pthread_atfork([] { state().mu.lock(); }, [] { state().mu.unlock(); },
                 [] { state().mu.unlock(); });
}

LoggerState& state() {
  // Leaked on purpose: logging must work during static destruction.
  static LoggerState* s = [] {
    auto* fresh = new LoggerState();
    installForkHandlers();
    return fresh;
  }();
  return *s;
}

struct SubsysName {
  const char* name;
  uint32_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kLogInit},
    {"COLL", kLogColl},
    {"P2P", kLogP2p},
    {"SHM", kLogShm},
    {"NET", kLogNet},
    {"GRAPH", kLogGraph},
    {"TUNING", kLogTuning},
    {"ENV", kLogEnv},
    {"ALLOC", kLogAlloc},
    {"CALL", kLogCall},
    {"PROXY", kLogProxy},
    {"NVLS", kLogNvls},
    {"BOOTSTRAP", kLogBootstrap},
    {"REG", kLogReg},
    {"PROFILE", kLogProfile},
    {"RAS", kLogRas},
    {"ALL", kLogAll},
};

// Caller holds s.mu.
void loadLocked(LoggerState& s) {
  s.config = LogConfig{};
  s.config.level = parseLogLevel(envString("NCCL_DEBUG").c_str());
  std::string subsys = envString("NCCL_DEBUG_SUBSYS");
  if (!subsys.empty()) s.config.subsysMask = parseLogSubsys(subsys.c_str());
  s.config.file = envString("NCCL_DEBUG_FILE");
  if (envIsSet("NCCL_DEBUG_TIMESTAMP_LEVELS")) {
    s.config.stampLevels = parseLogStampLevels(envString("NCCL_DEBUG_TIMESTAMP_LEVELS").c_str());
  }
  if (envIsSet("NCCL_DEBUG_TIMESTAMP_FORMAT")) {
    s.config.stampFormat = envString("NCCL_DEBUG_TIMESTAMP_FORMAT");
  }
  if (s.out != nullptr && s.out != stderr) fclose(s.out);
  s.out = stderr;
  if (!s.config.file.empty()) {
    std::string name = expandLogFileName(s.config.file);
    FILE* f = fopen(name.c_str(), "a");
    if (f != nullptr) {
      setvbuf(f, nullptr, _IOLBF, 0);
      s.out = f;
    }
  }
  gethostname(s.host, sizeof(s.host) - 1);
  char* dot = strchr(s.host, '.');
  if (dot != nullptr) *dot = '\0';
  s.loaded = true;
  s.subsysMask.store(s.config.subsysMask, std::memory_order_relaxed);
  // Release: pairs with logEnabled's acquire load (the mask above first).
  s.level.store(static_cast<int>(s.config.level), std::memory_order_release);
}

}  // namespace

LogLevel parseLogLevel(const char* s) {
  if (s == nullptr || *s == '\0') return LogLevel::None;
  if (strcasecmp(s, "VERSION") == 0) return LogLevel::Version;
  if (strcasecmp(s, "WARN") == 0) return LogLevel::Warn;
  if (strcasecmp(s, "INFO") == 0) return LogLevel::Info;
  if (strcasecmp(s, "TRACE") == 0) return LogLevel::Trace;
  // NCCL accepts ABORT as WARN-level; anything else silences the logger.
  if (strcasecmp(s, "ABORT") == 0) return LogLevel::Warn;
  return LogLevel::None;
}

namespace {

// A comma list with an optional leading '^' (inverts), as NCCL's
// NCCL_DEBUG_SUBSYS: the OR of bitOf(token) over its tokens, spaces ignored.
template <typename BitOf>
uint32_t parseNameList(const char* s, BitOf bitOf) {
  if (s == nullptr) return 0;
  bool invert = (*s == '^');
  if (invert) ++s;
  uint32_t mask = 0;
  std::string token;
  auto flush = [&]() {
    if (!token.empty()) mask |= bitOf(token.c_str());
    token.clear();
  };
  for (; *s != '\0'; ++s) {
    if (*s == ',') {
      flush();
    } else if (*s != ' ') {
      token.push_back(*s);
    }
  }
  flush();
  return invert ? ~mask : mask;
}

}  // namespace

uint32_t parseLogSubsys(const char* s) {
  return parseNameList(s, [](const char* token) {
    uint32_t bit = 0;
    for (const SubsysName& n : kSubsysNames) {
      if (strcasecmp(token, n.name) == 0) bit |= n.bit;
    }
    return bit;
  });
}

uint32_t parseLogStampLevels(const char* s) {
  return parseNameList(s, [](const char* token) -> uint32_t {
    if (strcasecmp(token, "ALL") == 0) return ~0u;
    // parseLogLevel maps unknown words to None: no bit for them.
    LogLevel l = parseLogLevel(token);
    return l == LogLevel::None ? 0 : logLevelBit(l);
  });
}

std::string formatLogStamp(const std::string& format, int64_t sec, int64_t nsec) {
  // "%Nf" first (strftime has no fractions), "%%" kept for strftime.
  std::string fmt;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '%' && i + 2 < format.size() && format[i + 1] >= '1' && format[i + 1] <= '9' &&
        format[i + 2] == 'f') {
      const int digits = format[i + 1] - '0';
      int64_t frac = nsec;
      for (int d = digits; d < 9; ++d) frac /= 10;
      char buf[16];
      snprintf(buf, sizeof(buf), "%0*" PRId64, digits, frac);
      fmt += buf;
      i += 2;
      continue;
    }
    fmt += c;
    if (c == '%' && i + 1 < format.size()) fmt += format[++i];  // "%%" and the others whole
  }
  time_t t = static_cast<time_t>(sec);
  struct tm local;
  localtime_r(&t, &local);
  char out[256];
  const size_t n = strftime(out, sizeof(out), fmt.c_str(), &local);
  return std::string(out, n);
}

std::string expandLogFileName(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        char host[64] = {0};
        gethostname(host, sizeof(host) - 1);
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

void reloadLogConfig() {
  LoggerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  loadLocked(s);
}

bool logEnabled(LogLevel level, uint32_t subsys) {
  LoggerState& s = state();
  // Acquire: pairs with loadLocked's release store (the mask is current).
  int current = s.level.load(std::memory_order_acquire);
  if (current < 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.loaded) loadLocked(s);
    current = s.level.load(std::memory_order_acquire);
  }
  if (static_cast<int>(level) > current) return false;
  if (level >= LogLevel::Info && (s.subsysMask.load(std::memory_order_relaxed) & subsys) == 0) {
    return false;
  }
  return true;
}

void logMessage(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof(body), fmt, ap);
  va_end(ap);

  LoggerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.loaded) loadLocked(s);
  if (level == LogLevel::Warn) s.lastWarn = body;
  if (static_cast<int>(level) > static_cast<int>(s.config.level)) return;
  if (level >= LogLevel::Info && (s.config.subsysMask & subsys) == 0) return;

  const char* tag = level == LogLevel::Warn ? "WARN" : level == LogLevel::Trace ? "TRACE" : "INFO";
  if ((s.config.stampLevels & logLevelBit(level)) != 0 && !s.config.stampFormat.empty()) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fputs(formatLogStamp(s.config.stampFormat, now.tv_sec, now.tv_nsec).c_str(), s.out);
  }
  long tid = syscall(SYS_gettid);
  char rank[16] = "";
  if (tlsRank >= 0) snprintf(rank, sizeof(rank), " [%d]", tlsRank);
  if (level == LogLevel::Warn || level == LogLevel::Trace) {
    const char* base = strrchr(file, '/');
    fprintf(s.out, "%s:%d:%ld%s NCCL %s %s:%d %s\n", s.host, getpid(), tid, rank, tag,
            base ? base + 1 : file, line, body);
  } else {
    fprintf(s.out, "%s:%d:%ld%s NCCL %s %s\n", s.host, getpid(), tid, rank, tag, body);
  }
  fflush(s.out);
}

void registerLoggerForkHandlers() {
  (void)state();
}

std::string lastWarning() {
  LoggerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.lastWarn;
}

LogRankScope::LogRankScope(int rank) : saved_(tlsRank) {
  tlsRank = rank;
}
LogRankScope::~LogRankScope() {
  tlsRank = saved_;
}

}  // namespace ferry
