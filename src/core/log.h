// The one logger. Semantics follow NCCL_DEBUG so existing user habits work:
//   NCCL_DEBUG        = VERSION | WARN | INFO | TRACE   (unset: nothing but errors
//                       returned to the caller; WARN lines are kept for
//                       ncclGetLastError either way)
//   NCCL_DEBUG_SUBSYS = comma list of INIT,COLL,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,
//                       CALL,PROXY,NVLS,BOOTSTRAP,REG,PROFILE,RAS,ALL; a leading '^'
//                       inverts the selection. Default INIT,BOOTSTRAP,ENV.
//   NCCL_DEBUG_FILE   = path; %h expands to the hostname, %p to the pid.
//   NCCL_DEBUG_TIMESTAMP_LEVELS = comma list of VERSION,WARN,INFO,TRACE,ALL
//                       (leading '^' inverts; default WARN): lines of these
//                       levels start with the local time in
//   NCCL_DEBUG_TIMESTAMP_FORMAT = strftime format, default "[%F %T] "; "%Nf"
//                       (N = 1..9) is the second's fraction to N digits.
// Every line is prefixed "host:pid:tid [rank] NCCL <LEVEL> " (after the
// timestamp, where its level has one). The rank is a thread-local set with
// LogRankScope by whoever acts for a communicator.
//
// Threading: all functions are thread-safe; lines are written whole.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

enum class LogLevel : int { None = 0, Version = 1, Warn = 2, Info = 3, Trace = 4 };

enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogColl = 1u << 1,
  kLogP2p = 1u << 2,
  kLogShm = 1u << 3,
  kLogNet = 1u << 4,
  kLogGraph = 1u << 5,
  kLogTuning = 1u << 6,
  kLogEnv = 1u << 7,
  kLogAlloc = 1u << 8,
  kLogCall = 1u << 9,
  kLogProxy = 1u << 10,
  kLogNvls = 1u << 11,
  kLogBootstrap = 1u << 12,
  kLogReg = 1u << 13,
  kLogProfile = 1u << 14,
  kLogRas = 1u << 15,
  kLogAll = ~0u,
};

constexpr uint32_t logLevelBit(LogLevel l) {
  return 1u << static_cast<int>(l);
}

// Parsed logger settings; exposed for unit tests of the parsers.
struct LogConfig {
  LogLevel level = LogLevel::None;
  uint32_t subsysMask = kLogInit | kLogBootstrap | kLogEnv;
  std::string file;                                    // empty: stderr
  uint32_t stampLevels = logLevelBit(LogLevel::Warn);  // bit per LogLevel
  std::string stampFormat = "[%F %T] ";
};
LogLevel parseLogLevel(const char* s);
uint32_t parseLogSubsys(const char* s);
// NCCL_DEBUG_TIMESTAMP_LEVELS: a mask of logLevelBit()s.
uint32_t parseLogStampLevels(const char* s);
std::string expandLogFileName(const std::string& pattern);
// The timestamp `format` gives for `sec` + `nsec` (local time), "%Nf"
// expanded first; empty when strftime cannot fit it in 255 bytes.
std::string formatLogStamp(const std::string& format, int64_t sec, int64_t nsec);

// True when a line at this level/subsystem would be printed.
bool logEnabled(LogLevel level, uint32_t subsys);

void logMessage(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// The last WARN text of this process (ncclGetLastError).
std::string lastWarning();

// Makes sure the logger's fork handlers are registered. prepare handlers run
// in reverse registration order, so a module whose own fork handler takes a
// lock it may hold while logging calls this before its pthread_atfork: fork
// then takes that module's lock first and the logger's last, the order every
// thread uses (log while holding the module lock, never the reverse).
void registerLoggerForkHandlers();

// Re-read NCCL_DEBUG* (used at communicator init and by tests).
void reloadLogConfig();

// Sets this thread's rank for log prefixes for the scope's lifetime.
class LogRankScope {
 public:
  explicit LogRankScope(int rank);
  ~LogRankScope();
  LogRankScope(const LogRankScope&) = delete;
  LogRankScope& operator=(const LogRankScope&) = delete;

 private:
  int saved_;
};

}  // namespace ferry

#define FERRY_WARN(...) \
  ::ferry::logMessage(::ferry::LogLevel::Warn, ::ferry::kLogAll, __FILE__, __LINE__, __VA_ARGS__)
#define FERRY_INFO(subsys, ...)                                                                \
  do {                                                                                         \
    if (::ferry::logEnabled(::ferry::LogLevel::Info, (subsys)))                                \
      ::ferry::logMessage(::ferry::LogLevel::Info, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define FERRY_TRACE(subsys, ...)                                                                \
  do {                                                                                          \
    if (::ferry::logEnabled(::ferry::LogLevel::Trace, (subsys)))                                \
      ::ferry::logMessage(::ferry::LogLevel::Trace, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define FERRY_LOG_CALL_FAILURE(status, what) \
  FERRY_INFO(::ferry::kLogCall, "%s failed: %s", (what), ::ferry::statusString(status))
