// ferry-run's pure parts: argument parsing and each rank's environment.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "args.h"
#include "plan.h"

namespace ferry::run {
namespace {

ParsedArgs parse(std::vector<std::string> args, double envTimeout = 0) {
  return parseArgs(args, envTimeout);
}

TEST(LauncherArgs, MinimalRun) {
  ParsedArgs p = parse({"-n", "4", "prog"});
  ASSERT_EQ(p.action, Action::Run) << p.error;
  EXPECT_EQ(p.options.nranks, 4);
  EXPECT_EQ(p.options.runtime, RuntimeChoice::Auto);
  EXPECT_EQ(p.options.timeoutSec, 0);
  EXPECT_FALSE(p.options.isolateGpus);
  EXPECT_EQ(p.options.command, (std::vector<std::string>{"prog"}));
}

TEST(LauncherArgs, AllOptionsAndProgramArgsPassThrough) {
  ParsedArgs p = parse({"--runtime", "cuda", "-n", "2", "--timeout", "1.5", "--isolate-gpus",
                        "prog", "-n", "7", "--timeout", "x", "--", "-h"});
  ASSERT_EQ(p.action, Action::Run) << p.error;
  EXPECT_EQ(p.options.nranks, 2);
  EXPECT_EQ(p.options.runtime, RuntimeChoice::Cuda);
  EXPECT_DOUBLE_EQ(p.options.timeoutSec, 1.5);
  EXPECT_TRUE(p.options.isolateGpus);
  EXPECT_EQ(p.options.command,
            (std::vector<std::string>{"prog", "-n", "7", "--timeout", "x", "--", "-h"}));
}

TEST(LauncherArgs, EqualsAndAttachedForms) {
  ParsedArgs p = parse({"-n3", "--runtime=host", "--timeout=2", "prog"});
  ASSERT_EQ(p.action, Action::Run) << p.error;
  EXPECT_EQ(p.options.nranks, 3);
  EXPECT_EQ(p.options.runtime, RuntimeChoice::Host);
  EXPECT_DOUBLE_EQ(p.options.timeoutSec, 2);
  p = parse({"--nranks=5", "--", "-prog-with-dash"});
  ASSERT_EQ(p.action, Action::Run) << p.error;
  EXPECT_EQ(p.options.nranks, 5);
  EXPECT_EQ(p.options.command, (std::vector<std::string>{"-prog-with-dash"}));
}

TEST(LauncherArgs, TimeoutFromEnvironmentUnlessGiven) {
  EXPECT_DOUBLE_EQ(parse({"-n", "1", "p"}, 30).options.timeoutSec, 30);
  EXPECT_DOUBLE_EQ(parse({"-n", "1", "--timeout", "4", "p"}, 30).options.timeoutSec, 4);
  EXPECT_DOUBLE_EQ(parse({"-n", "1", "--timeout", "0", "p"}, 30).options.timeoutSec, 0);
}

TEST(LauncherArgs, HelpAndParams) {
  EXPECT_EQ(parse({"-h"}).action, Action::Help);
  EXPECT_EQ(parse({"--help"}).action, Action::Help);
  EXPECT_EQ(parse({"-n", "2", "--help", "prog"}).action, Action::Help);
  EXPECT_EQ(parse({"--params"}).action, Action::Params);
  EXPECT_EQ(parse({"--params", "-n", "2"}).action, Action::Params);
  // After the program name, -h belongs to the program.
  EXPECT_EQ(parse({"-n", "1", "prog", "-h"}).action, Action::Run);
}

TEST(LauncherArgs, RejectsBadArguments) {
  const std::vector<std::vector<std::string>> bad = {
      {},                        // nothing
      {"prog"},                  // missing -n
      {"-n", "0", "prog"},       // N < 1
      {"-n", "-1", "prog"},      // negative
      {"-n", "4"},               // no program
      {"-n"},                    // -n without value
      {"-n", "four", "prog"},    // not a number
      {"-n", "4x", "prog"},      // trailing junk
      {"-n", "100000", "prog"},  // above kMaxRanks
      {"-n", "2", "--runtime", "tpu", "prog"},
      {"-n", "2", "--runtime"},
      {"-n", "2", "--timeout", "-1", "prog"},
      {"-n", "2", "--timeout", "abc", "prog"},
      {"-n", "2", "--timeout", "inf", "prog"},
      {"-n", "2", "--bogus", "prog"},
      {"-x", "prog"},
      {"-n", "2", "--"},  // "--" but no program
  };
  for (const auto& args : bad) {
    ParsedArgs p = parse(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(p.action, Action::Error) << "accepted: " << joined;
    EXPECT_FALSE(p.error.empty()) << joined;
  }
}

TEST(LauncherArgs, StrictNumberParsers) {
  int n = -1;
  EXPECT_TRUE(parseRankCount("12", &n));
  EXPECT_EQ(n, 12);
  EXPECT_FALSE(parseRankCount("", &n));
  EXPECT_FALSE(parseRankCount("+3", &n));
  EXPECT_FALSE(parseRankCount(" 3", &n));
  EXPECT_FALSE(parseRankCount("1234567890", &n));
  double s = -1;
  EXPECT_TRUE(parseSeconds("0.25", &s));
  EXPECT_DOUBLE_EQ(s, 0.25);
  EXPECT_FALSE(parseSeconds("1s", &s));
  EXPECT_FALSE(parseSeconds("nan", &s));
}

TEST(LauncherArgs, UsageMentionsEveryOption) {
  std::string usage = usageText();
  for (const char* word : {"-n", "--runtime", "--timeout", "--isolate-gpus", "--params", "--help",
                           "FERRY_DEVICE", "NCCL_COMM_ID", "124"}) {
    EXPECT_NE(usage.find(word), std::string::npos) << word;
  }
}

std::map<std::string, std::string> asMap(const std::vector<EnvPair>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    EXPECT_EQ(m.count(kv.first), 0u) << "duplicate " << kv.first;
    m[kv.first] = kv.second;
  }
  return m;
}

TEST(LauncherPlan, VisibleGpus) {
  EXPECT_EQ(visibleGpus(false, "", 3), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(visibleGpus(false, "", 0), std::vector<std::string>{});
  EXPECT_EQ(visibleGpus(true, "", 8), std::vector<std::string>{});  // set but empty: none
  EXPECT_EQ(visibleGpus(true, "3, 5,,GPU-ab", 8), (std::vector<std::string>{"3", "5", "GPU-ab"}));
}

TEST(LauncherPlan, RankEnvironmentOnHost) {
  ParsedArgs p = parse({"-n", "4", "--runtime", "host", "prog"});
  HostFacts facts;
  facts.hostDevices = 3;
  facts.commPort = 40001;
  facts.masterPort = 40002;
  EXPECT_EQ(checkPlan(p.options, facts), "");
  for (int r = 0; r < 4; ++r) {
    auto env = asMap(rankEnvironment(p.options, facts, r));
    EXPECT_EQ(env["NCCL_COMM_ID"], "127.0.0.1:40001");
    EXPECT_EQ(env["FERRY_RANK"], std::to_string(r));
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["FERRY_NRANKS"], "4");
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(env["MASTER_PORT"], "40002");
    EXPECT_EQ(env["FERRY_RUNTIME"], "host");
    EXPECT_EQ(env["FERRY_DEVICE"], std::to_string(r % 3));
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  }
}

TEST(LauncherPlan, GpuAssignmentRoundRobin) {
  HostFacts facts;
  facts.gpus = {"4", "6"};
  ParsedArgs p = parse({"-n", "5", "--runtime", "cuda", "prog"});
  ASSERT_EQ(checkPlan(p.options, facts), "");
  for (int r = 0; r < 5; ++r) {
    auto env = asMap(rankEnvironment(p.options, facts, r));
    EXPECT_EQ(env["FERRY_DEVICE"], std::to_string(r % 2));
    EXPECT_EQ(env["FERRY_RUNTIME"], "cuda");
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  }
  p = parse({"-n", "5", "--isolate-gpus", "prog"});  // auto runtime with GPUs
  ASSERT_EQ(checkPlan(p.options, facts), "");
  for (int r = 0; r < 5; ++r) {
    auto env = asMap(rankEnvironment(p.options, facts, r));
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], facts.gpus[r % 2]);
    EXPECT_EQ(env["FERRY_DEVICE"], "0");
    EXPECT_EQ(env.count("FERRY_RUNTIME"), 0u);
  }
}

// --hosts H: contiguous runs of ranks per emulated host (NCCL_HOSTID), and
// bad counts refused.
TEST(LauncherPlan, EmulatedHosts) {
  HostFacts facts;
  ParsedArgs p = parse({"-n", "6", "--hosts", "3", "--runtime", "host", "prog"});
  ASSERT_EQ(p.action, Action::Run) << p.error;
  EXPECT_EQ(p.options.hosts, 3);
  for (int r = 0; r < 6; ++r) {
    auto env = asMap(rankEnvironment(p.options, facts, r));
    EXPECT_EQ(env["NCCL_HOSTID"], "ferry-run-host" + std::to_string(r / 2));
  }
  p = parse({"-n", "2", "prog"});
  EXPECT_EQ(asMap(rankEnvironment(p.options, facts, 0)).count("NCCL_HOSTID"), 0u);
  EXPECT_EQ(parse({"-n", "2", "--hosts", "3", "prog"}).action, Action::Error);
  EXPECT_EQ(parse({"-n", "2", "--hosts", "0", "prog"}).action, Action::Error);
  EXPECT_EQ(parse({"-n", "2", "--hosts=x", "prog"}).action, Action::Error);
}

TEST(LauncherPlan, CudaWithoutGpuFailsClearly) {
  HostFacts none;
  std::string why = checkPlan(parse({"-n", "2", "--runtime", "cuda", "p"}).options, none);
  EXPECT_NE(why.find("no GPU"), std::string::npos) << why;
  EXPECT_NE(checkPlan(parse({"-n", "2", "--isolate-gpus", "p"}).options, none), "");
  EXPECT_EQ(checkPlan(parse({"-n", "2", "p"}).options, none), "");
}

TEST(LauncherPlan, MergeEnvironmentReplacesInherited) {
  std::vector<std::string> base = {"PATH=/bin", "RANK=9", "X=1=2", "FERRY_DEVICE=7"};
  auto merged = mergeEnvironment(base, {{"RANK", "0"}, {"FERRY_DEVICE", "1"}, {"NEW", ""}});
  EXPECT_EQ(merged,
            (std::vector<std::string>{"PATH=/bin", "X=1=2", "RANK=0", "FERRY_DEVICE=1", "NEW="}));
}

}  // namespace
}  // namespace ferry::run
