// The collective connections of one communicator (DESIGN.md layers 5/7):
// per channel, a FIFO + flags in each rank's own memory that its ring
// predecessor fills and its successor's drains are acknowledged into (the
// protocol is in algo/coll_ring.h). Separate from the SM-free p2p
// connections, whose control blocks belong to the proxy's protocol.
//
// Three parts, each one region per rank: flags, LL FIFOs, FIFOs
// (RingRegionLayout). The peers part holds one connection per peer (kernel
// point-to-point); the LL and Simple parts the ring channels' FIFOs of that
// protocol (collectives). Apart because they are made at different times:
// kernel p2p pairs two ranks at a time: its connections are made here at
// init, or per peer on first use (coll/peer_connect.h: the default where
// the ranks are separate processes of one host); the ring channels serve collectives
// only, which every rank reaches in the same order, and a collective's
// protocol is a function of its size alone, so each protocol's part is made
// by the first collective that uses it (NCCL_RUNTIME_CONNECT=1, NCCL's
// default): a communicator that only carries point-to-point holds no
// collective FIFOs, and one whose collectives are all small only the LL
// ones (16 MiB on CUDA instead of 144).
// P2P: the region is device memory, mapped by every same-host rank through
// IPC (host runtime: memfd). SHM (NCCL_P2P_DISABLE, or no peer access): host shared
// memory registered with the device. The owner chooses; neighbours follow.
//
// Setup of either part is collective (all-gather of region descriptors, a
// barrier) on the communicator's bootstrap.
//
// Lifetime: owned by the CollEngine; must outlive every kernel that uses it
// (the engine waits for its last launch before freeing).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "algo/coll_ring.h"
#include "algo/p2p_kernel.h"
#include "bootstrap/bootstrap.h"
#include "core/fd.h"
#include "coll/ring_net.h"
#include "core/params.h"
#include "proxy/proxy.h"
#include "runtime/runtime.h"
#include "topo/topology.h"
#include "transport/setup.h"
#include "transport/shared_memory.h"

namespace ferry {

// The same context as the p2p connections' setup (transport/setup.h).
using RingSetupContext = P2pSetupContext;

// What a rank publishes about a region it owns (all-gathered at a part's
// setup; the blob of its RPC resource for regions made on first use).
struct RegionInfo {
  uint32_t shm;  // 1: host shared memory (fetch the memfd through the RPC)
  uint32_t ipcType;
  uint64_t bytes;
  uint64_t localPtr;  // valid in the owner's process only (same-process peers)
  uint64_t ipcSize;
  uint64_t ipcOffset;
  uint8_t ipc[64];
  char proxyName[112];
};
static_assert(std::is_trivially_copyable_v<RegionInfo>);

// One rank's region, local or mapped from a neighbour.
struct RingRegion {
  char* base = nullptr;                      // address usable by kernels/streams in this process
  std::unique_ptr<rt::DeviceMemory> device;  // own, P2P
  std::unique_ptr<SharedRegion> shared;      // own or mapped, SHM
  std::unique_ptr<rt::HostRegistration> registration;  // SHM, this process's mapping
  std::unique_ptr<rt::IpcMapping> mapping;             // neighbour's, P2P
};

struct RingResources {
  int nranks = 0;
  int peerConns = 0;           // kernel-p2p connections in the region (peers part: nranks)
  int pos = 0;                 // this rank's ring position
  std::vector<int> ringOrder;  // rank at each ring position
  int nchannels = 0;           // LL and Simple parts only
  uint32_t nslots = 0;
  uint64_t slotBytes = 0;
  uint64_t llSlotBytes = 0;
  // Kernel point-to-point lanes (algo/p2p_kernel.h): each peer connection is
  // split into p2pLanes lane connections, each p2pLaneSlots slots of
  // p2pLaneSlotBytes in its 1/p2pLanes of the peer's FIFO, and p2pLlSlots
  // LL slots of p2pLlSlotBytes in its 1/p2pLanes of the peer's LL FIFO.
  uint32_t p2pLanes = 1;
  uint64_t p2pLaneBytes = 0;
  uint32_t p2pLaneSlots = 0;
  uint64_t p2pLaneSlotBytes = 0;
  uint64_t p2pLlLaneBytes = 0;
  uint32_t p2pLlSlots = 0;
  uint64_t p2pLlSlotBytes = 0;
  bool shm = false;                  // own region in host shared memory
  uint64_t regionBytes = 0;          // the own region's size (memory this rank holds)
  uint64_t collectiveFifoBytes = 0;  // of which the ring channels' FIFOs (LL and Simple)
  RingRegion own;
  // Every rank's region as mapped here, by rank (the own entry only holds
  // `base`); ranks on other hosts stay unmapped (base null).
  std::vector<RingRegion> regions;
  // Kernel point-to-point can reach every rank: mapped on this host, or
  // through `peerNet` on others.
  bool allPeersReachable = false;
  // A communicator spanning hosts: the hops that cross them (coll/ring_net.h).
  std::unique_ptr<RingNet> net;
  // Kernel point-to-point's lanes to peers on other hosts (coll/ring_net.h).
  std::unique_ptr<PeerNet> peerNet;
  std::unique_ptr<rt::DeviceMemory> channels;   // algo::RingChannel[nchannels]
  std::unique_ptr<rt::DeviceMemory> ringRanks;  // int32_t[nranks]
  // Kernel point-to-point: p2pLanes connections per peer (self included),
  // each laid out like a ring channel whose previous and next rank are that
  // peer; entry peer * p2pLanes + lane.
  std::unique_ptr<rt::DeviceMemory> peerChannels;  // algo::RingChannel[nranks * p2pLanes]

  algo::RingChannel* peerChannelArray() const {
    return peerChannels ? static_cast<algo::RingChannel*>(peerChannels->ptr()) : nullptr;
  }

  algo::RingChannel* channelArray() const {
    return channels ? static_cast<algo::RingChannel*>(channels->ptr()) : nullptr;
  }
  const int32_t* ringRankArray() const {
    return ringRanks ? static_cast<const int32_t*>(ringRanks->ptr()) : nullptr;
  }
};

// Offsets inside a region (the same on every rank). Flag lines: the ring
// channels' connections, then the peer lane connections' (nchannels +
// nranks x lanes), three lines each (tail, head, LL head). Then the LL FIFOs
// (nslots x llSlotBytes each) of the ring channels and of each peer, then
// the FIFOs (nslots x slotBytes) of the ring channels and of each peer (a
// peer's lanes share its LL FIFO and its FIFO, an equal slice of each). The
// flags and LL FIFOs start zeroed (an LL line's flag must never match by
// accident).
constexpr uint64_t kRingFlagLine = 128;
// Flag line `which` (0 tail, 1 head, 2 LL head) of connection `conn` in a
// region (or a mirror of one) at `base`.
inline uint64_t* ringFlagLine(char* base, uint64_t conn, int which) {
  return reinterpret_cast<uint64_t*>(base + (conn * 3 + which) * kRingFlagLine);
}
struct RingRegionLayout {
  uint64_t llFifos = 0;  // offset of the first LL FIFO
  uint64_t fifos = 0;    // offset of the first FIFO; [0, fifos) zeroed
  uint64_t bytes = 0;    // whole region
  uint64_t llFifoBytes = 0;
  uint64_t fifoBytes = 0;
};
// Bytes of a peer's LL FIFO that each of its `lanes` lanes gets: an equal
// share, rounded down to whole 32-byte units so that every lane's LL lines
// start 16-byte aligned whatever the slot knobs (1/lanes alone may not be).
uint64_t p2pLlLaneShare(uint64_t peerLlFifoBytes, uint32_t lanes);
RingRegionLayout ringRegionLayout(int nchannels, int nranks, uint32_t lanes, uint32_t nslots,
                                  uint64_t slotBytes, uint64_t llSlotBytes);

enum class RingPart { Peers, Ll, Simple };

// One side of a kernel-p2p connection between two ranks: the lane flag
// lines (three per lane, lane 0 first), the LL FIFO and the FIFO that the
// other rank writes into (each lane gets an equal slice).
struct PeerSide {
  char* lines = nullptr;
  char* llFifo = nullptr;
  char* fifo = nullptr;
};
// Lane `lane` of a kernel-p2p connection: `own` in this rank's memory,
// `theirs` the peer's side for this rank as mapped here (null members give
// null pointers).
algo::RingChannel peerLaneChannel(const RingResources& res, const PeerSide& own,
                                  const PeerSide& theirs, uint32_t lane);

// The peers part's shape (FIFO, lanes, SHM or not) from the knobs and the
// topology, without making anything (connections on first use).
[[nodiscard]] Status describePeers(const RingSetupContext& ctx, RingResources* res);

// What zeroes a region made while kernels may be running (kernel p2p's
// connections on first use): a non-blocking stream and pinned zeros made
// at init, so that no allocation, free or stream creation of pinned memory
// (which CUDA synchronizes with the whole device: a kernel waiting for a
// peer that waits for this rank would never finish) happens then.
struct RegionZeroer {
  rt::Stream* stream = nullptr;
  const void* zeros = nullptr;  // at least zeroBytes of pinned zeros
};
// A region owned by this rank: `bytes` of device memory (or host shared
// memory with `shm`), the first `zeroBytes` zeroed (through `zeroer` when
// given, else uploadSync), offered through the proxy's RPC under (commKey,
// key) with its RegionInfo as the blob.
[[nodiscard]] Status makeRegion(const RingSetupContext& ctx, uint64_t bytes, uint64_t zeroBytes,
                                bool shm, uint64_t key, RingRegion* r, RegionInfo* info,
                                const RegionZeroer* zeroer = nullptr);
// Whether mapping `info` needs the owner's descriptor (memfd).
bool regionNeedsFd(const RegionInfo& info);
// Maps another process's region described by `info` (`fd`: its descriptor
// when regionNeedsFd).
[[nodiscard]] Status mapRegion(const RingSetupContext& ctx, const RegionInfo& info, UniqueFd fd,
                               RingRegion* r);
// Copies `bytes` from host memory (null: zeros) into `dst` (device-
// accessible) through a pinned staging buffer on a stream of its own, and
// waits: setup-time uploads only.
[[nodiscard]] Status uploadSync(rt::Runtime* runtime, void* dst, const void* src, size_t bytes);

// Builds one part (collective: every rank calls it at the same point).
// Fails when a neighbour cannot be reached. LL / Simple: the channels with
// only that protocol's FIFOs (the other's have 0 bytes). Simple: a communicator
// spanning hosts gets proxy-carried hops where the ring crosses them
// (coll/ring_net.h), or, without a network engine, no ring (`*out` stays
// empty, nchannels 0). Peers across hosts: only when kernel p2p may cross
// them (NCCL_PASS_SM=0 or FERRY_P2P_KERNEL_ACROSS_HOSTS=1, the same on every
// rank), through proxy-carried lanes (coll/ring_net.h); otherwise, or
// without a network engine, `*out` stays empty.
[[nodiscard]] Status setupRing(const RingSetupContext& ctx, RingPart part, RingResources* out);

}  // namespace ferry
