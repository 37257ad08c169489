// Harness shared by the point-to-point test programs: the world
// communicator, messages with independently recomputable payloads, and the
// cases that several programs use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/buffers.h"
#include "nccl.h"

namespace ferry::test {

struct World {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int rank = -1;
  int nranks = 0;
  uint64_t seed = 0;    // rank 0's seed, agreed by all ranks
  World split() const;  // same ranks, a new communicator (same stream)
  void destroy();
};

// The bytes rank `sender` sends to `receiver` in `round`: the same on every
// rank, so the receiver checks against its own computation.
void expectedPayload(const World& w, uint64_t round, int sender, int receiver, void* out,
                     size_t bytes);

struct Message {
  Message(const World& w, uint64_t round, int sender, int receiver, size_t bytes, BufferKind kind);
  void fillAsSender();
  void poison();
  void verify(const char* what);  // counts a failure at the first wrong byte
  const World& world;
  uint64_t round;
  int sender, receiver;
  size_t bytes;
  TestBuffer buf;
};

// FERRY_TEST_RANKS_PER_HOST=k (tests only): ranks emulate hosts of k ranks
// each. Returns k (0: not set), and onOtherHost whether `a` and `b` are on
// different emulated hosts.
int ranksPerTestHost();
bool onOtherHost(int a, int b);

void gatherScatter(World& w, int root);
void caseLarge(World& w);
void caseAbortInFlight(World& w);
void caseTimeout(World& w);
void caseLateExchange(World& w);
void caseLateMany(World& w);
void caseInPlace(World& w);
void caseInPlaceMixed(World& w);
void caseStagingCap(World& w);
void caseRecvDepth(World& w);
void caseSendDepth(World& w);
void caseSendDepthBusy(World& w);
void caseSharedStaging(World& w);
void caseChain(World& w);
void caseNewStreams(World& w);
// Whether the case can run: an even rank count and FERRY_P2P_STAGE_SENDS=1
// (prints that it is skipped otherwise).
bool stagedPairsOrSkip(const World& w, const char* name);

// main(): launcher environment, device, world, seed, stream; runs argv[1].
int runCase(int argc, char** argv, const std::map<std::string, std::function<void(World&)>>& cases);

}  // namespace ferry::test
