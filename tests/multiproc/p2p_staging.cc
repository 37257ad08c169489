// Bounds on the SM-free path's staging pool (FERRY_P2P_STAGING_MAX_BYTES).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "ferry.h"
#include "mp_check.h"
#include "p2p_util.h"

namespace ferry::test {

// Sends staged under lazy loading (FERRY_P2P_STAGE_SENDS=1 here) that run
// far ahead of their receiver fill the pool only up to the cap (8 MiB: two
// 4 MiB blocks): the third send waits for its receiver, which posts 300 ms
// late, and then pushes from its own buffer or stages into a block that
// freed meanwhile (session 26: a rank running ahead grew the pool on every
// message, to 10-28 GiB). With
// FERRY_TEST_EXPECT_SOFT=1 (FERRY_P2P_STAGING_WAIT_MS=1) the waits end at
// their bound and the pool grows past the cap: slower, never a hang. Even
// ranks send to the odd rank after them; every byte is checked.
void caseStagingCap(World& w) {
  if (!stagedPairsOrSkip(w, "stagingcap")) return;
  const char* capText = getenv("FERRY_P2P_STAGING_MAX_BYTES");
  const unsigned long long cap = capText != nullptr ? strtoull(capText, nullptr, 10) : 0;
  const bool soft = getenv("FERRY_TEST_EXPECT_SOFT") != nullptr;
  const bool sender = w.rank % 2 == 0;
  const int peer = w.rank ^ 1;
  const int k = 8;
  const size_t bytes = (size_t{3} << 20) + 4096 * (w.seed % 7) + 13;  // one 4 MiB block each
  std::vector<std::unique_ptr<Message>> msgs;
  for (int i = 0; i < k; ++i) {
    const int from = w.rank & ~1;
    msgs.push_back(
        std::make_unique<Message>(w, 1100 + i, from, from + 1, bytes, BufferKind::Plain));
    if (sender) {
      msgs.back()->fillAsSender();
    } else {
      msgs.back()->poison();
    }
  }
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
  if (!sender) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (auto& m : msgs) {
    EXPECT_OK(sender ? ncclSend(m->buf.data(), bytes, ncclInt8, peer, w.comm, w.stream)
                     : ncclRecv(m->buf.data(), bytes, ncclInt8, peer, w.comm, w.stream));
  }
  EXPECT_OK(ncclFerryStreamSynchronize(w.stream));
  if (!sender) {
    for (auto& m : msgs) m->verify("stagingcap");
  } else {
    unsigned long long staging = 0;
    EXPECT_OK(ncclFerryCommMemory(w.comm, nullptr, nullptr, &staging));
    ncclFerryPeerStats_t st{};
    EXPECT_OK(ncclFerryCommPeerStats(w.comm, peer, &st));
    printf(
        "stagingcap: %d sends of %zu bytes ahead of their receiver: %llu bytes of staging "
        "(cap %llu), %llu of %llu pushed from the send buffer\n",
        k, bytes, staging, cap, st.sendZeroCopyOps, st.sendOps);
    if (soft) {
      EXPECT_TRUE(staging > cap, "%llu bytes of staging: the wait should have ended at 1 ms",
                  staging);
    } else {
      EXPECT_TRUE(staging > 0 && staging <= cap, "%llu bytes of staging past the cap of %llu",
                  staging, cap);
    }
  }
  EXPECT_OK(ncclFerryBootstrapBarrier(w.comm));
}

}  // namespace ferry::test
