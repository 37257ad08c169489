#include <chrono>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/cpu_profile.h"

namespace ferry {
namespace {

TEST(CpuProfile, DisabledRecordsNothing) {
  CpuProfile p;
  { ProfScope s(&p, ProfSlot::P2pSmFree); }
  ProfScope none(nullptr, ProfSlot::Claim);  // no profile: a no-op
  EXPECT_EQ(p.describe(), "");
}

TEST(CpuProfile, CountsAverageAndMax) {
  CpuProfile p;
  p.enable(true);
  // Fresh values each run; the reference is computed here independently.
  std::mt19937_64 rng(std::random_device{}());
  const int n = 3 + static_cast<int>(rng() % 5);
  int64_t total = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    int64_t ns = 1000 + static_cast<int64_t>(rng() % 900000);
    p.add(ProfSlot::PushWait, ns);
    total += ns;
    max = std::max(max, ns);
  }
  p.add(ProfSlot::CollLaunch, -5);  // a clock step back counts as 0
  char want[200];
  snprintf(want, sizeof(want),
           "coll.launch n=1 avg=0.0 max=0.0 us; p2p.pushwait n=%d avg=%.1f max=%.1f rest=%.1f us",
           n, static_cast<double>(total) / n / 1000.0, static_cast<double>(max) / 1000.0,
           static_cast<double>(total - max) / (n - 1) / 1000.0);
  EXPECT_EQ(p.describe(), want);
}

TEST(CpuProfile, ScopeMeasuresItsTime) {
  CpuProfile p;
  p.enable(true);
  {
    ProfScope s(&p, ProfSlot::Fences);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const std::string d = p.describe();
  ASSERT_EQ(d.rfind("p2p.fences n=1 avg=", 0), 0u) << d;
  const double avg = std::stod(d.substr(std::string("p2p.fences n=1 avg=").size()));
  EXPECT_GE(avg, 3000.0) << d;
}

TEST(CpuProfile, ConcurrentAddsAllCount) {
  CpuProfile p;
  p.enable(true);
  std::thread a([&] {
    for (int i = 0; i < 10000; ++i) p.add(ProfSlot::Claim, 2000);
  });
  std::thread b([&] {
    for (int i = 0; i < 10000; ++i) p.add(ProfSlot::Claim, 4000);
  });
  a.join();
  b.join();
  EXPECT_EQ(p.describe(), "p2p.claim n=20000 avg=3.0 max=4.0 rest=3.0 us");
}

}  // namespace
}  // namespace ferry
