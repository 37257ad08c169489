#include <cstddef>
#include <cstring>

#include <gtest/gtest.h>

#include "comm/config.h"

namespace ferry {
namespace {

TEST(Config, NullMeansDefaults) {
  CommConfig base;
  base.blocking = false;
  CommConfig out;
  ASSERT_EQ(resolveConfig(nullptr, base, &out), ncclSuccess);
  EXPECT_FALSE(out.blocking);
}

TEST(Config, UndefinedFieldsInheritBase) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  CommConfig base;
  base.maxCTAs = 7;
  base.commName = "parent";
  CommConfig out;
  ASSERT_EQ(resolveConfig(&c, base, &out), ncclSuccess);
  EXPECT_EQ(out.maxCTAs, 7);
  EXPECT_EQ(out.commName, "parent");
}

TEST(Config, GivenFieldsWin) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  c.minCTAs = 2;
  c.maxCTAs = 9;
  c.commName = "mine";
  CommConfig out;
  ASSERT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclSuccess);
  EXPECT_FALSE(out.blocking);
  EXPECT_EQ(out.minCTAs, 2);
  EXPECT_EQ(out.maxCTAs, 9);
  EXPECT_EQ(out.commName, "mine");
}

TEST(Config, BadHeaderRejected) {
  CommConfig out;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.magic = 0x12345678;
  EXPECT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclInvalidArgument);
  c = NCCL_CONFIG_INITIALIZER;
  c.size = 3;
  EXPECT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclInvalidArgument);
  c = NCCL_CONFIG_INITIALIZER;
  c.version = 7;
  EXPECT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclInvalidArgument);
}

TEST(Config, OutOfRangeRejected) {
  CommConfig out;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 2;
  EXPECT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclInvalidArgument);
  c = NCCL_CONFIG_INITIALIZER;
  c.minCTAs = 8;
  c.maxCTAs = 4;
  EXPECT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclInvalidArgument);
  c = NCCL_CONFIG_INITIALIZER;
  c.CTAPolicy = 9;
  EXPECT_EQ(resolveConfig(&c, CommConfig{}, &out), ncclInvalidArgument);
}

TEST(Config, OlderSmallerStructReadOnlyAsFarAsItGoes) {
  // A config from an older header: only the fields up to maxCTAs exist. The
  // bytes after it are garbage that must not be read.
  unsigned char raw[sizeof(ncclConfig_t)];
  memset(raw, 0x5a, sizeof(raw));
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.size = offsetof(ncclConfig_t, netName);
  c.blocking = 0;
  memcpy(raw, &c, c.size);
  CommConfig out;
  ASSERT_EQ(resolveConfig(reinterpret_cast<ncclConfig_t*>(raw), CommConfig{}, &out), ncclSuccess);
  EXPECT_FALSE(out.blocking);
  EXPECT_TRUE(out.commName.empty());
  EXPECT_EQ(out.trafficClass, -1);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// The SM budget knobs: NCCL_MAX_CTAS, else NCCL_MAX_NCHANNELS, else 64;
// out-of-range defaults are clamped, never fatal.
TEST(Config, MaxCtasDefaultsFromTheEnvironment) {
  EXPECT_EQ(defaultConfig(Params::fromValues({})).maxCTAs, 64);
  EXPECT_EQ(defaultConfig(Params::fromValues({{"NCCL_MAX_CTAS", "8"}})).maxCTAs, 8);
  EXPECT_EQ(defaultConfig(Params::fromValues({{"NCCL_MAX_NCHANNELS", "4"}})).maxCTAs, 4);
  EXPECT_EQ(defaultConfig(Params::fromValues({{"NCCL_MAX_CTAS", "8"}, {"NCCL_MAX_NCHANNELS", "4"}}))
                .maxCTAs,
            8);
  EXPECT_EQ(defaultConfig(Params::fromValues({{"NCCL_MAX_CTAS", "500"}})).maxCTAs, 64);
  const CommConfig c =
      defaultConfig(Params::fromValues({{"NCCL_MAX_CTAS", "4"}, {"NCCL_MIN_CTAS", "9"}}));
  EXPECT_EQ(c.minCTAs, 4);  // clamped to maxCTAs
}

}  // namespace
}  // namespace ferry
