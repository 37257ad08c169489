// ferry-bench's command line (bench/ferry_bench/args.h): sizes, every option,
// the errors, and the arguments a --compare parent hands its children.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ferry_bench/args.h"

namespace ferry::bench {
namespace {

bool parse(std::vector<const char*> args, Options* o, std::string* error) {
  args.insert(args.begin(), "ferry-bench");
  return parseArgs(static_cast<int>(args.size()), args.data(), o, error);
}

TEST(BenchArgs, Sizes) {
  size_t b = 0;
  EXPECT_TRUE(parseSize("8", &b));
  EXPECT_EQ(b, 8u);
  EXPECT_TRUE(parseSize("64K", &b));
  EXPECT_EQ(b, 65536u);
  EXPECT_TRUE(parseSize("3m", &b));
  EXPECT_EQ(b, 3u << 20);
  EXPECT_TRUE(parseSize("2G", &b));
  EXPECT_EQ(b, 2ull << 30);
  for (const char* bad : {"", "K", "1.5M", "-4", "12X", "4KB", "99999999999999999999"}) {
    EXPECT_FALSE(parseSize(bad, &b)) << bad;
  }
  EXPECT_FALSE(parseSize("17179869184G", &b));  // 2^34 G overflows 64 bits
}

TEST(BenchArgs, Defaults) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"all_reduce"}, &o, &error)) << error;
  ASSERT_EQ(o.ops.size(), 1u);
  EXPECT_EQ(o.ops[0], OpKind::AllReduce);
  EXPECT_EQ(o.type, ncclFloat32);
  EXPECT_EQ(o.redop, ncclSum);
  EXPECT_EQ(o.inPlace, InPlaceMode::Both);
  EXPECT_TRUE(o.check);
  EXPECT_FALSE(o.overlap);
  EXPECT_FALSE(o.window);
  EXPECT_EQ(o.gemmSize, 8192u);
  EXPECT_TRUE(o.lib.empty());
}

TEST(BenchArgs, EveryOption) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"-b",
                     "1K",
                     "-e",
                     "1M",
                     "-f",
                     "4",
                     "-d",
                     "bfloat16",
                     "-o",
                     "avg",
                     "-r",
                     "3",
                     "-w",
                     "0",
                     "-n",
                     "7",
                     "-g",
                     "2",
                     "-c",
                     "0",
                     "--inplace",
                     "only",
                     "--lib",
                     "/a/libnccl.so.2",
                     "--compare=/b/libnccl.so.2",
                     "--json",
                     "out.json",
                     "--overlap",
                     "--window",
                     "--gemm-size",
                     "4K",
                     "--seed",
                     "42",
                     "gather"},
                    &o, &error))
      << error;
  EXPECT_EQ(o.ops, std::vector<OpKind>{OpKind::Gather});
  EXPECT_EQ(o.minBytes, 1024u);
  EXPECT_EQ(o.maxBytes, 1u << 20);
  EXPECT_EQ(o.factor, 4u);
  EXPECT_EQ(o.type, ncclBfloat16);
  EXPECT_EQ(o.redop, ncclAvg);
  EXPECT_EQ(o.root, 3);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.gpus, 2);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.inPlace, InPlaceMode::Only);
  EXPECT_EQ(o.lib, "/a/libnccl.so.2");
  EXPECT_EQ(o.compare, "/b/libnccl.so.2");
  EXPECT_EQ(o.json, "out.json");
  EXPECT_TRUE(o.overlap);
  EXPECT_TRUE(o.window);
  EXPECT_EQ(o.gemmSize, 4096u);
  EXPECT_TRUE(o.seedSet);
  EXPECT_EQ(o.seed, 42u);
}

TEST(BenchArgs, OpLists) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"all"}, &o, &error)) << error;
  EXPECT_EQ(o.ops.size(), static_cast<size_t>(kOpCount));
  ASSERT_TRUE(parse({"sendrecv,alltoall,scatter"}, &o, &error)) << error;
  EXPECT_EQ(o.ops, (std::vector<OpKind>{OpKind::SendRecv, OpKind::AlltoAll, OpKind::Scatter}));
  const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                         "alltoall",   "sendrecv",   "gather",         "scatter"};
  for (const char* name : names) EXPECT_TRUE(parse({name}, &o, &error)) << name;
}

TEST(BenchArgs, EveryTypeAndRedOp) {
  const char* types[] = {"int8", "uint8", "int32",  "uint32",   "int64",   "uint64",
                         "half", "float", "double", "bfloat16", "fp8e4m3", "fp8e5m2"};
  for (int i = 0; i < 12; ++i) {
    Options o;
    std::string error;
    ASSERT_TRUE(parse({"all_reduce", "-d", types[i]}, &o, &error)) << types[i];
    EXPECT_EQ(o.type, static_cast<ncclDataType_t>(i)) << types[i];
  }
  const char* ops[] = {"sum", "prod", "max", "min", "avg"};
  for (int i = 0; i < 5; ++i) {
    Options o;
    std::string error;
    ASSERT_TRUE(parse({"reduce", "-o", ops[i]}, &o, &error)) << ops[i];
    EXPECT_EQ(o.redop, static_cast<ncclRedOp_t>(i));
  }
}

TEST(BenchArgs, Errors) {
  const std::vector<std::vector<const char*>> bad = {
      {},                                                 // no op
      {"allreduce"},                                      // unknown op
      {"all_reduce,bogus"},                               // unknown op in a list
      {"all_reduce", "sendrecv"},                         // two positionals
      {"all_reduce", "-d", "float128"},                   // unknown type
      {"all_reduce", "-o", "xor"},                        // unknown redop
      {"all_reduce", "-b", "1M", "-e", "1K"},             // min > max
      {"all_reduce", "-b", "1K", "-e", "1M", "-f", "1"},  // factor that never grows
      {"all_reduce", "-n", "0"},
      {"all_reduce", "-w", "-1"},
      {"all_reduce", "-g", "0"},
      {"all_reduce", "-r", "-1"},
      {"all_reduce", "-c", "2"},
      {"all_reduce", "--inplace", "sometimes"},
      {"all_reduce", "--gemm-size", "8"},
      {"all_reduce", "--frobnicate", "1"},
      {"all_reduce", "-n"},      // missing value
      {"all_reduce", "--lib="},  // empty value
      {"all_reduce", "--compare", "b", "--json-out", "x"},
  };
  for (const auto& args : bad) {
    Options o;
    std::string error;
    EXPECT_FALSE(parse(args, &o, &error)) << (args.empty() ? "(none)" : args.back());
    EXPECT_FALSE(error.empty());
  }
  Options o;
  std::string error;
  EXPECT_TRUE(parse({"--help"}, &o, &error));
  EXPECT_TRUE(o.help);
}

TEST(BenchArgs, Sweep) {
  Options o;
  o.minBytes = 8;
  o.maxBytes = 64 << 10;
  o.factor = 4;
  EXPECT_EQ(sweepSizes(o), (std::vector<size_t>{8, 32, 128, 512, 2048, 8192, 32768}));
  o.minBytes = o.maxBytes = 1 << 20;
  o.factor = 1;
  EXPECT_EQ(sweepSizes(o), (std::vector<size_t>{1 << 20}));
  o.minBytes = 1ull << 62;
  o.maxBytes = ~0ull;
  o.factor = 2;
  EXPECT_EQ(sweepSizes(o).size(), 2u);  // stops before overflowing
}

TEST(BenchArgs, ChildArgsRoundTrip) {
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"all_gather,reduce",
                     "-b",
                     "4",
                     "-e",
                     "16M",
                     "-f",
                     "8",
                     "-d",
                     "fp8e5m2",
                     "-o",
                     "min",
                     "-r",
                     "1",
                     "-w",
                     "2",
                     "-n",
                     "9",
                     "-g",
                     "4",
                     "-c",
                     "0",
                     "--inplace",
                     "no",
                     "--overlap-nothing",
                     "--window",
                     "--gemm-size",
                     "1024",
                     "--compare",
                     "/x"},
                    &o, &error))
      << error;
  o.compare.clear();
  o.lib = "/lib/a.so";
  o.jsonOut = "/tmp/out";
  o.seed = 77;
  o.seedSet = true;
  const std::vector<std::string> args = toArgs(o);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  Options back;
  ASSERT_TRUE(parse(argv, &back, &error)) << error;
  EXPECT_EQ(back.ops, o.ops);
  EXPECT_EQ(back.minBytes, o.minBytes);
  EXPECT_EQ(back.maxBytes, o.maxBytes);
  EXPECT_EQ(back.factor, o.factor);
  EXPECT_EQ(back.type, o.type);
  EXPECT_EQ(back.redop, o.redop);
  EXPECT_EQ(back.root, o.root);
  EXPECT_EQ(back.warmup, o.warmup);
  EXPECT_EQ(back.iters, o.iters);
  EXPECT_EQ(back.gpus, o.gpus);
  EXPECT_EQ(back.check, o.check);
  EXPECT_EQ(back.inPlace, o.inPlace);
  EXPECT_TRUE(back.overlap) << "--overlap-nothing implies --overlap";
  EXPECT_TRUE(back.overlapNothing);
  EXPECT_TRUE(back.window);
  EXPECT_EQ(back.gemmSize, o.gemmSize);
  EXPECT_EQ(back.lib, o.lib);
  EXPECT_EQ(back.jsonOut, o.jsonOut);
  EXPECT_EQ(back.seed, 77u);
  EXPECT_TRUE(back.compare.empty());
}

}  // namespace
}  // namespace ferry::bench
