// NCCL_DEBUG_TIMESTAMP_LEVELS / NCCL_DEBUG_TIMESTAMP_FORMAT: which lines
// start with the local time, and in what form. The references are computed
// here from localtime_r and strftime, independently of the logger's
// fraction handling.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <regex>
#include <string>

#include "common/env_guard.h"
#include "common/log_capture.h"
#include "common/random.h"
#include "core/log.h"

namespace ferry {
namespace {

using test::EnvGuard;

std::string strftimeLocal(const char* format, int64_t sec) {
  time_t t = static_cast<time_t>(sec);
  struct tm local;
  localtime_r(&t, &local);
  char out[128];
  return std::string(out, strftime(out, sizeof(out), format, &local));
}

TEST(LogStamp, LevelListParsing) {
  EXPECT_EQ(parseLogStampLevels("WARN"), logLevelBit(LogLevel::Warn));
  EXPECT_EQ(parseLogStampLevels("info, trace"),
            logLevelBit(LogLevel::Info) | logLevelBit(LogLevel::Trace));
  EXPECT_EQ(parseLogStampLevels("ALL"), ~0u);
  EXPECT_EQ(parseLogStampLevels("^WARN"), ~logLevelBit(LogLevel::Warn));
  EXPECT_EQ(parseLogStampLevels("ABORT"), logLevelBit(LogLevel::Warn));  // NCCL's alias
  EXPECT_EQ(parseLogStampLevels("bogus"), 0u);
  EXPECT_EQ(parseLogStampLevels(""), 0u);
  EXPECT_EQ(LogConfig{}.stampLevels, logLevelBit(LogLevel::Warn));  // NCCL 2.28's default
}

TEST(LogStamp, FormatWithFractions) {
  test::Rng rng(test::testSeed(), 41);
  for (int round = 0; round < 50; ++round) {
    // Any second of 2001-2037 and any nanosecond of it.
    const int64_t sec = rng.range(978307200, 2114380800);
    const int64_t nsec = rng.range(0, 999999999);
    char nine[16];
    snprintf(nine, sizeof(nine), "%09" PRId64, nsec);
    const std::string day = strftimeLocal("%F %T", sec);
    EXPECT_EQ(formatLogStamp("[%F %T] ", sec, nsec), "[" + day + "] ");
    for (int digits = 1; digits <= 9; ++digits) {
      const std::string fmt = "%F %T.%" + std::to_string(digits) + "f|";
      EXPECT_EQ(formatLogStamp(fmt, sec, nsec), day + "." + std::string(nine, digits) + "|")
          << fmt << " nsec " << nsec;
    }
    // "%%" stays strftime's literal percent, also before digits and f.
    EXPECT_EQ(formatLogStamp("%%3f %s", sec, nsec), "%3f " + std::to_string(sec));
  }
  EXPECT_EQ(formatLogStamp("%3f", 0, 5), "000");                    // leading zeros kept
  EXPECT_EQ(formatLogStamp("%0f", 0, 5), strftimeLocal("%0f", 0));  // not a fraction: as is
  EXPECT_EQ(formatLogStamp("", 0, 0), "");
  EXPECT_EQ(formatLogStamp(std::string(300, 'x'), 0, 0), "");  // too long: no stamp
}

// The lines the logger writes, with the defaults and with both knobs set.
TEST(LogStamp, LinesCarryTheStampOfTheirLevel) {
  const std::string token = std::to_string(test::Rng(test::testSeed(), 42).next());
  test::LogCapture capture("INFO", "P2P");
  ASSERT_TRUE(capture.ok());
  {
    EnvGuard levels("NCCL_DEBUG_TIMESTAMP_LEVELS", nullptr);
    EnvGuard format("NCCL_DEBUG_TIMESTAMP_FORMAT", nullptr);
    reloadLogConfig();
    FERRY_WARN("warn-%s", token.c_str());
    FERRY_INFO(kLogP2p, "info-%s", token.c_str());
  }
  {
    EnvGuard levels("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO");
    EnvGuard format("NCCL_DEBUG_TIMESTAMP_FORMAT", "<%s.%6f> ");
    reloadLogConfig();
    FERRY_WARN("warn2-%s", token.c_str());
    FERRY_INFO(kLogP2p, "info2-%s", token.c_str());
  }
  {
    EnvGuard levels("NCCL_DEBUG_TIMESTAMP_LEVELS", "");
    reloadLogConfig();
    FERRY_WARN("warn3-%s", token.c_str());
  }
  const std::string log = capture.text();
  const std::string t = token;
  const std::string pre = R"([^ \[\]<>]+:\d+:\d+ NCCL )";
  auto has = [&](const std::string& re) {
    return std::regex_search(log, std::regex("(^|\n)" + re + "(\n|$)"));
  };
  EXPECT_TRUE(has(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )" + pre + "WARN .*warn-" + t)) << log;
  EXPECT_TRUE(has(pre + "INFO info-" + t)) << log;
  EXPECT_TRUE(has(pre + "WARN .*warn2-" + t)) << log;
  EXPECT_TRUE(has(R"(<\d+\.\d{6}> )" + pre + "INFO info2-" + t)) << log;
  EXPECT_TRUE(has(pre + "WARN .*warn3-" + t)) << log;
  // The <%s> stamp is this run's time: within a minute of now.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(<(\d+)\.\d{6}> )")));
  EXPECT_LT(std::llabs(std::stoll(m[1].str()) - static_cast<long long>(time(nullptr))), 60);
}

}  // namespace
}  // namespace ferry
