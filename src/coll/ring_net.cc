#include "coll/ring_net.h"

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "coll/ring_setup.h"
#include "transport/net_setup.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
// One hop of channel `channel` with `peer`, its engine connection not yet
// made (a receiver listens once its handle has a place to go). Channels
// spread over the engine's devices (NICs).
std::unique_ptr<RingHop> newHop(net::NetEngine* engine, const Topology& t, bool isSend, int peer,
                                int channel) {
  auto hop = std::make_unique<RingHop>();
  hop->isSend = isSend;
  hop->peer = peer;
  hop->channel = channel;
  hop->link = std::make_unique<NetLink>(engine, netDevFor(engine, t, channel), isSend);
  return hop;
}

// Drives every hop's connect or accept until all have their comm; a send
// hop connects with the handle `handleOf` gives it (its receiver's, copied
// where the engine may keep its progress).
Status connectHops(const P2pSetupContext& ctx, const std::function<void*(const RingHop&)>& handleOf,
                   std::vector<std::unique_ptr<RingHop>>& hops) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::max<int64_t>(ctx.timeoutMs, 0));
  for (;;) {
    bool pending = false;
    for (auto& h : hops) {
      NetLink& l = *h->link;
      if (l.comm != nullptr) continue;
      void* comm = nullptr;
      if (h->isSend) {
        FERRY_CHECK(l.engine->connect(l.dev, handleOf(*h), &comm));
      } else {
        FERRY_CHECK(l.engine->accept(l.listenComm, &comm));
      }
      if (comm == nullptr) {
        pending = true;
        continue;
      }
      l.comm = comm;
      l.closeListen();
    }
    if (!pending) return ncclSuccess;
    // Acquire: pairs with the release store of whoever aborts.
    if (ctx.abortFlag != nullptr && ctx.abortFlag->load(std::memory_order_acquire)) {
      FERRY_FAIL(ncclInternalError, "aborted while connecting the collective ring across hosts");
    }
    if (Clock::now() > deadline) {
      FERRY_FAIL(ncclSystemError,
                 "the collective ring's network connections were not established within %lld ms "
                 "(FERRY_BOOTSTRAP_TIMEOUT)",
                 static_cast<long long>(ctx.timeoutMs));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

}  // namespace

Status setupRingNet(const P2pSetupContext& ctx, bool ll, int nchannels, uint32_t nslots,
                    uint64_t slotBytes, const RingRegionLayout& layout, int prevRank, int nextRank,
                    char* ownCpu, RingNet* out, char** prevBase, char** nextBase) {
  const Topology& t = *ctx.topology;
  const int n = static_cast<int>(t.peers.size());
  const bool prevRemote = t.links[prevRank] == PeerLink::OtherHost;
  const bool nextRemote = t.links[nextRank] == PeerLink::OtherHost;
  net::NetEngine* engine = nullptr;
  if (prevRemote || nextRemote) FERRY_CHECK(netEngineFor(ctx, &engine));
  // Every rank takes part in the handle exchange below, hops or not.
  std::vector<NetHandle> handles(static_cast<size_t>(n) * nchannels);
  for (auto& h : handles) h.fill(0);
  if (engine != nullptr && prevRemote) {
    for (int c = 0; c < nchannels; ++c) {
      auto hop = newHop(engine, t, false, prevRank, c);
      FERRY_CHECK(engine->listen(hop->link->dev, handles[t.myRank * nchannels + c].data(),
                                 &hop->link->listenComm));
      out->hops.push_back(std::move(hop));
    }
  }
  if (n > 1) {
    FERRY_CHECK(ctx.bootstrap->allGather(handles.data(), sizeof(NetHandle) * nchannels));
  }
  if (engine == nullptr) return ncclSuccess;
  std::vector<NetHandle> nextHandles(handles.begin() + nextRank * nchannels,
                                     handles.begin() + (nextRank + 1) * nchannels);
  if (nextRemote) {
    for (int c = 0; c < nchannels; ++c) out->hops.push_back(newHop(engine, t, true, nextRank, c));
  }
  FERRY_CHECK(connectHops(
      ctx, [&nextHandles](const RingHop& h) { return nextHandles[h.channel].data(); }, out->hops));

  // Mirrors: the next rank's channel FIFOs and flag lines (the kernel's
  // sends), the previous rank's flag lines (the kernel's acknowledgements).
  // The LL part's FIFOs come before `fifos` (its own FIFO part is empty).
  const uint64_t fifos = ll ? layout.llFifos : layout.fifos;
  const uint64_t fifoBytes = ll ? layout.llFifoBytes : layout.fifoBytes;
  if (nextRemote) {
    // The LL FIFOs end before `fifos`, the Simple ones after it.
    const uint64_t fifosEnd =
        ll ? layout.fifos : layout.fifos + static_cast<uint64_t>(nchannels) * fifoBytes;
    const uint64_t sizesBytes = static_cast<uint64_t>(nchannels) * nslots * sizeof(uint64_t);
    FERRY_CHECK(ctx.runtime->allocHost(fifosEnd + sizesBytes, &out->nextMirror));
    memset(out->nextMirror->ptr(), 0, layout.fifos);
    *nextBase = static_cast<char*>(out->nextMirror->ptr());
    out->sendSizes = reinterpret_cast<uint64_t*>(*nextBase + fifosEnd);
    memset(out->sendSizes, 0, sizesBytes);
  }
  if (prevRemote) {
    FERRY_CHECK(ctx.runtime->allocHost(layout.llFifos, &out->prevMirror));
    memset(out->prevMirror->ptr(), 0, layout.llFifos);
    *prevBase = static_cast<char*>(out->prevMirror->ptr());
  }
  // Flag lines (ring_setup.h): 0 tail (LL too: its kernel posts one where
  // a hop carries the sends, algo/coll_ll.h), 1 head, 2 LL head.
  const int head = ll ? 2 : 1;
  for (auto& h : out->hops) {
    const int c = h->channel;
    h->nslots = nslots;
    h->slotBytes = slotBytes;
    void* registered = nullptr;
    if (h->isSend) {
      h->fifo = *nextBase + fifos + c * fifoBytes;
      h->kernelWord = ringFlagLine(*nextBase, c, 0);  // the kernel's sendTail
      h->proxyWord = ringFlagLine(ownCpu, c, head);   // the kernel's sendHead
      h->sizes = out->sendSizes + static_cast<uint64_t>(c) * nslots;
      registered = h->fifo;
    } else {
      h->fifo = ownCpu + fifos + c * fifoBytes;
      h->kernelWord = ringFlagLine(*prevBase, c, head);  // the kernel's recvHead
      // LL: lines land aside and are copied word by word (proxy/ring_hop.h);
      // no tail, the lines' flags are the readiness.
      h->proxyWord = ll ? nullptr : ringFlagLine(ownCpu, c, 0);  // the kernel's recvTail
      if (ll) h->landing = std::make_unique<uint64_t[]>(fifoBytes / sizeof(uint64_t));
      registered = ll ? static_cast<void*>(h->landing.get()) : h->fifo;
    }
    FERRY_CHECK(h->link->regMr(registered, fifoBytes, &h->mhandle));
  }
  FERRY_INFO(kLogInit | kLogColl | kLogNet,
             "collectives: %s ring across hosts: %s rank %d, %s rank %d, %d channel(s) each via "
             "NET/%s (channel 0 on device %d)",
             ll ? "LL" : "Simple", prevRemote ? "receives from" : "local previous", prevRank,
             nextRemote ? "sends to" : "local next", nextRank, nchannels, engine->name(),
             netDevFor(engine, t, 0));
  return ncclSuccess;
}

namespace {

// Peer q's mirror: this rank's lane flag lines in q's region (lanes x 3
// lines: the kernel's sendTail, recvHead, LL head), the slot sizes, and its
// FIFO slice.
Status makePeerMirror(const P2pSetupContext& ctx, const PeerNetShape& s, uint64_t fifoBytes,
                      PeerMirror* m) {
  const uint64_t lineBytes = static_cast<uint64_t>(s.lanes) * 3 * kRingFlagLine;
  const uint64_t sizeBytes = static_cast<uint64_t>(s.lanes) * s.laneSlots * sizeof(uint64_t);
  const uint64_t flagBytes = algo::roundUp(lineBytes + sizeBytes, 4096);
  FERRY_CHECK(ctx.runtime->allocHost(flagBytes + fifoBytes, &m->memory));
  memset(m->memory->ptr(), 0, flagBytes);
  m->flags = static_cast<char*>(m->memory->ptr());
  m->sizes = reinterpret_cast<uint64_t*>(m->flags + lineBytes);
  m->fifo = m->flags + flagBytes;
  return ncclSuccess;
}

}  // namespace

Status setupPeerNet(const P2pSetupContext& ctx, const PeerNetShape& s,
                    const RingRegionLayout& layout, char* ownCpu, PeerNet* out) {
  const Topology& t = *ctx.topology;
  const int n = static_cast<int>(t.peers.size());
  const int me = t.myRank;
  net::NetEngine* engine = nullptr;
  FERRY_CHECK(netEngineFor(ctx, &engine));
  // handles[(receiver * n + sender) * lanes + lane]; every rank fills its
  // own row (its receives from remote senders) and all take part.
  const size_t row = static_cast<size_t>(n) * s.lanes;
  std::vector<NetHandle> handles(row * n);
  for (auto& h : handles) h.fill(0);
  const uint64_t laneFifo = layout.fifoBytes / s.lanes;
  auto conn = [&](int q, uint32_t lane) { return static_cast<uint64_t>(q) * s.lanes + lane; };
  out->mirrors.resize(n);
  for (int q = 0; engine != nullptr && q < n; ++q) {
    if (t.links[q] != PeerLink::OtherHost) continue;
    FERRY_CHECK(makePeerMirror(ctx, s, layout.fifoBytes, &out->mirrors[q]));
    for (uint32_t lane = 0; lane < s.lanes; ++lane) {
      auto hop = std::make_unique<RingHop>();
      hop->isSend = false;
      hop->peer = q;
      hop->channel = static_cast<int>(lane);
      hop->link = std::make_unique<NetLink>(engine, netDevFor(engine, t, q + lane), false);
      FERRY_CHECK(engine->listen(hop->link->dev, handles[me * row + conn(q, lane)].data(),
                                 &hop->link->listenComm));
      out->hops.push_back(std::move(hop));
      auto send = std::make_unique<RingHop>();
      send->isSend = true;
      send->peer = q;
      send->channel = static_cast<int>(lane);
      send->link = std::make_unique<NetLink>(engine, netDevFor(engine, t, q + lane), true);
      out->hops.push_back(std::move(send));
    }
  }
  if (n > 1) FERRY_CHECK(ctx.bootstrap->allGather(handles.data(), sizeof(NetHandle) * row));
  if (engine == nullptr) return ncclSuccess;
  FERRY_CHECK(connectHops(
      ctx,
      [&](const RingHop& h) {
        return handles[h.peer * row + conn(me, static_cast<uint32_t>(h.channel))].data();
      },
      out->hops));
  for (auto& h : out->hops) {
    const uint32_t lane = static_cast<uint32_t>(h->channel);
    const PeerMirror& m = out->mirrors[h->peer];
    h->nslots = s.laneSlots;
    h->slotBytes = s.laneSlotBytes;
    if (h->isSend) {
      // The kernel fills the mirror of our FIFO slice in the peer's region.
      h->fifo = m.fifo + lane * laneFifo;
      h->kernelWord = ringFlagLine(m.flags, lane, 0);               // its sendTail
      h->proxyWord = ringFlagLine(ownCpu, conn(h->peer, lane), 1);  // its sendHead
      h->sizes = m.sizes + static_cast<uint64_t>(lane) * s.laneSlots;
    } else {
      h->fifo = ownCpu + layout.fifos + static_cast<uint64_t>(h->peer) * layout.fifoBytes +
                lane * laneFifo;
      h->kernelWord = ringFlagLine(m.flags, lane, 1);               // its recvHead
      h->proxyWord = ringFlagLine(ownCpu, conn(h->peer, lane), 0);  // its recvTail
    }
    FERRY_CHECK(h->link->regMr(h->fifo, laneFifo, &h->mhandle));
  }
  FERRY_INFO(kLogInit | kLogP2p | kLogNet,
             "kernel p2p across hosts: %zu hops (%u lanes per peer and direction) via NET/%s",
             out->hops.size(), s.lanes, engine->name());
  return ncclSuccess;
}

}  // namespace ferry
