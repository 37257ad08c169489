// The public header must be layout-identical to NCCL 2.28's. The expected
// numbers were read off NVIDIA's header on x86-64 (never included here).
#include <cstddef>

#include <gtest/gtest.h>

#include "nccl.h"

TEST(Abi, HeaderIsFerrys) {
#ifndef FERRY_NCCL_H
  FAIL() << "the toolkit's nccl.h was picked up instead of Ferry's";
#endif
  SUCCEED();
}

TEST(Abi, VersionMacros) {
  EXPECT_EQ(NCCL_VERSION_CODE, 22809);
  EXPECT_EQ(NCCL_VERSION(2, 28, 9), 22809);
  EXPECT_EQ(NCCL_VERSION(2, 8, 4), 2804);  // the old encoding below 2.9
  EXPECT_EQ(NCCL_UNIQUE_ID_BYTES, 128);
}

TEST(Abi, StructLayouts) {
  EXPECT_EQ(sizeof(ncclUniqueId), 128u);
  EXPECT_EQ(sizeof(ncclConfig_t), 80u);
  EXPECT_EQ(offsetof(ncclConfig_t, magic), 8u);
  EXPECT_EQ(offsetof(ncclConfig_t, version), 12u);
  EXPECT_EQ(offsetof(ncclConfig_t, blocking), 16u);
  EXPECT_EQ(offsetof(ncclConfig_t, maxCTAs), 28u);
  EXPECT_EQ(offsetof(ncclConfig_t, netName), 32u);
  EXPECT_EQ(offsetof(ncclConfig_t, splitShare), 40u);
  EXPECT_EQ(offsetof(ncclConfig_t, commName), 48u);
  EXPECT_EQ(offsetof(ncclConfig_t, CTAPolicy), 60u);
  EXPECT_EQ(offsetof(ncclConfig_t, nvlinkCentricSched), 76u);
  EXPECT_EQ(sizeof(ncclSimInfo_t), 24u);
  EXPECT_EQ(offsetof(ncclSimInfo_t, estimatedTime), 16u);
  EXPECT_EQ(sizeof(ncclRedOp_t), 4u);
  EXPECT_EQ(sizeof(ncclDataType_t), 4u);
  EXPECT_EQ(sizeof(ncclResult_t), 4u);
}

TEST(Abi, EnumValues) {
  EXPECT_EQ(ncclInProgress, 7);
  EXPECT_EQ(ncclNumResults, 8);
  EXPECT_EQ(ncclAvg, 4);
  EXPECT_EQ(ncclNumOps, 5);
  EXPECT_EQ(static_cast<long>(ncclMaxRedOp), 0x7fffffffL);
  EXPECT_EQ(ncclBfloat16, 9);
  EXPECT_EQ(ncclFloat8e5m2, 11);
  EXPECT_EQ(ncclNumTypes, 12);
  EXPECT_EQ(ncclScalarHostImmediate, 1);
}

TEST(Abi, Initializers) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(c.size, sizeof(ncclConfig_t));
  EXPECT_EQ(c.magic, 0xcafebeefu);
  EXPECT_EQ(c.version, 22809u);
  EXPECT_EQ(c.blocking, NCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ(c.netName, nullptr);
  EXPECT_EQ(c.nvlinkCentricSched, NCCL_CONFIG_UNDEF_INT);
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(s.magic, 0x74685283u);
  EXPECT_EQ(s.estimatedTime, NCCL_UNDEF_FLOAT);
}
