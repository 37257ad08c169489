#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/agreed_knobs.h"
#include "core/log.h"
#include "core/params.h"

namespace ferry {
namespace {

TEST(Params, IntParsing) {
  int64_t v = 0;
  EXPECT_TRUE(parseParamInt("42", &v));
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(parseParamInt("0x10", &v));
  EXPECT_EQ(v, 16);
  EXPECT_TRUE(parseParamInt("4M", &v));
  EXPECT_EQ(v, 4 << 20);
  EXPECT_TRUE(parseParamInt("-3", &v));
  EXPECT_EQ(v, -3);
  EXPECT_FALSE(parseParamInt("", &v));
  EXPECT_FALSE(parseParamInt("12abc", &v));
  EXPECT_FALSE(parseParamInt("99999999999999999999", &v));
  EXPECT_FALSE(parseParamInt("9999999999999G", &v));
}

TEST(Params, BoolParsing) {
  bool b = false;
  EXPECT_TRUE(parseParamBool("1", &b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(parseParamBool("no", &b));
  EXPECT_FALSE(b);
  EXPECT_FALSE(parseParamBool("maybe", &b));
}

TEST(Params, DefaultsAndOverrides) {
  Params p = Params::fromValues({{"FERRY_BOOTSTRAP_TIMEOUT", "7"}, {"FERRY_RUNTIME", "host"}});
  EXPECT_EQ(p.getInt(ParamId::BootstrapTimeout), 7);
  EXPECT_TRUE(p.isSet(ParamId::BootstrapTimeout));
  EXPECT_EQ(p.getString(ParamId::Runtime), "host");
  EXPECT_EQ(p.getInt(ParamId::HostDevices), 8);
  EXPECT_FALSE(p.isSet(ParamId::HostDevices));
}

TEST(Params, MalformedValueFallsBackToDefault) {
  Params p = Params::fromValues({{"FERRY_BOOTSTRAP_TIMEOUT", "soon"}});
  EXPECT_EQ(p.getInt(ParamId::BootstrapTimeout), 120);
  EXPECT_FALSE(p.isSet(ParamId::BootstrapTimeout));
  EXPECT_NE(lastWarning().find("FERRY_BOOTSTRAP_TIMEOUT"), std::string::npos);
}

TEST(Params, DumpListsEveryKnob) {
  std::string dump = Params::fromValues({}).dump();
  for (const ParamDef& d : paramDefs()) {
    EXPECT_NE(dump.find(d.name), std::string::npos) << d.name;
  }
}

// README.md documents every knob: adding one to the registry without
// documenting it fails here.
TEST(Params, ReadmeDocumentsEveryKnob) {
  std::ifstream in(std::string(FERRY_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string readme = ss.str();
  for (const ParamDef& d : paramDefs()) {
    EXPECT_NE(readme.find(std::string("`") + d.name + "`"), std::string::npos)
        << d.name << " is missing from README.md";
  }
}

TEST(AgreedKnobs, EqualUnsetOrSameValueAgree) {
  AgreedKnobs none = collectAgreedKnobs(Params::fromValues({}));
  AgreedKnobs other = collectAgreedKnobs(Params::fromValues({{"FERRY_BOOTSTRAP_TIMEOUT", "9"}}));
  EXPECT_EQ(compareAgreedKnobs(none, 0, other, 1), ncclSuccess);  // not an agreed knob
  AgreedKnobs a = collectAgreedKnobs(Params::fromValues({{"FERRY_P2P_KERNEL_MAX_BYTES", "1M"}}));
  AgreedKnobs b =
      collectAgreedKnobs(Params::fromValues({{"FERRY_P2P_KERNEL_MAX_BYTES", "1048576"}}));
  EXPECT_EQ(compareAgreedKnobs(a, 0, b, 1), ncclSuccess);  // same value, spelled differently
  AgreedKnobs p = collectAgreedKnobs(Params::fromValues({{"NCCL_PROTO", "LL,Simple"}}));
  EXPECT_EQ(compareAgreedKnobs(p, 0, p, 1), ncclSuccess);
}

TEST(AgreedKnobs, DifferentValueOrExplicitDefaultIsRefusedByName) {
  AgreedKnobs none = collectAgreedKnobs(Params::fromValues({}));
  AgreedKnobs one = collectAgreedKnobs(Params::fromValues({{"FERRY_P2P_KERNEL_MAX_BYTES", "1M"}}));
  EXPECT_EQ(compareAgreedKnobs(none, 0, one, 3), ncclInvalidUsage);
  EXPECT_NE(lastWarning().find("FERRY_P2P_KERNEL_MAX_BYTES differs between rank 0 (unset, "
                               "default 4M) and rank 3 (set to 1048576)"),
            std::string::npos)
      << lastWarning();
  AgreedKnobs dflt = collectAgreedKnobs(Params::fromValues({{"NCCL_PASS_SM", "1"}}));
  EXPECT_EQ(compareAgreedKnobs(none, 0, dflt, 1), ncclInvalidUsage);
  AgreedKnobs ll = collectAgreedKnobs(Params::fromValues({{"NCCL_PROTO", "LL"}}));
  AgreedKnobs simple = collectAgreedKnobs(Params::fromValues({{"NCCL_PROTO", "Simple"}}));
  EXPECT_EQ(compareAgreedKnobs(ll, 0, simple, 1), ncclInvalidUsage);
  EXPECT_NE(lastWarning().find("NCCL_PROTO differs"), std::string::npos) << lastWarning();
  // Ranks that pick different channel counts across hosts would hang.
  AgreedKnobs hop = collectAgreedKnobs(Params::fromValues({{"FERRY_COLL_NET_HOP_BYTES", "256K"}}));
  EXPECT_EQ(compareAgreedKnobs(none, 0, hop, 1), ncclInvalidUsage);
  EXPECT_NE(lastWarning().find("FERRY_COLL_NET_HOP_BYTES differs"), std::string::npos)
      << lastWarning();
}

TEST(Log, LevelAndSubsysParsing) {
  EXPECT_EQ(parseLogLevel("INFO"), LogLevel::Info);
  EXPECT_EQ(parseLogLevel("warn"), LogLevel::Warn);
  EXPECT_EQ(parseLogLevel("TRACE"), LogLevel::Trace);
  EXPECT_EQ(parseLogLevel("VERSION"), LogLevel::Version);
  EXPECT_EQ(parseLogLevel("bogus"), LogLevel::None);
  EXPECT_EQ(parseLogLevel(nullptr), LogLevel::None);
  EXPECT_EQ(parseLogSubsys("INIT,P2P"), kLogInit | kLogP2p);
  EXPECT_EQ(parseLogSubsys("ALL"), static_cast<uint32_t>(kLogAll));
  EXPECT_EQ(parseLogSubsys("^INIT"), ~static_cast<uint32_t>(kLogInit));
  EXPECT_EQ(parseLogSubsys("init, bootstrap"), kLogInit | kLogBootstrap);
}

TEST(Log, FileNameExpansion) {
  std::string name = expandLogFileName("/tmp/x.%h.%p.log");
  EXPECT_EQ(name.find("%"), std::string::npos);
  EXPECT_NE(name.find(std::to_string(getpid())), std::string::npos);
  EXPECT_EQ(expandLogFileName("a%%b"), "a%b");
}

TEST(Log, WarnIsKeptForGetLastError) {
  FERRY_WARN("unit-test warning %d", 1234);
  EXPECT_EQ(lastWarning(), "unit-test warning 1234");
}

}  // namespace
}  // namespace ferry
