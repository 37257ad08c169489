// Network connections at communicator init (internal to transport/setup.cc):
// every pair of ranks on different hosts gets one connection per direction
// through the process's network engine (net/net_registry.h), established
// eagerly inside setupP2p like the P2P/SHM ones. A connection is L links
// (engine comms; FERRY_NET_LINKS) that its chunks are striped over
// (proxy/net_progress.h).
//
// Per link of connection p -> me: the receiver listens on a listen comm of
// its own (so the comm accept() returns is known to belong to p and to that
// link) and publishes the listen handle: link 0's in the all-gathered
// connection table, the others' by a bootstrap message to p
// (exchangeNetHandles); the sender copies each handle into a buffer of its
// own (plugins keep connect progress in it) and connects. connect() and accept() never block, and
// each rank is sender and receiver of several peers at once, so connectNetPeers drives all of this
// rank's pending connects and accepts in one loop.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "net/net.h"
#include "transport/connection.h"
#include "transport/setup.h"

namespace ferry {

using NetHandle = std::array<char, net::kNetHandleBytes>;

// The engine for this communicator's peers on other hosts. Null (success)
// when it has none, or when the engine cannot be created: then one WARN
// says so and those peers get no transport. Fails only when the user's
// configuration is wrong (NCCL_NET naming no engine: ncclInvalidArgument).
[[nodiscard]] Status netEngineFor(const P2pSetupContext& ctx, net::NetEngine** out);

// Communicators spanning hosts of at most this many ranks make kernel p2p's
// lanes to the other hosts at init by default (FERRY_P2P_KERNEL_ACROSS_HOSTS
// = -1), so that send/recv captured into a CUDA graph works there.
constexpr int kAutoKernelLanesRanks = 8;

// Kernel p2p lanes per peer across hosts unless FERRY_P2P_KERNEL_LANES says
// (each lane is two network connections per remote peer).
constexpr int kKernelLanesAcrossHosts = 2;

// How many kernel p2p lanes a communicator of `nranks` spanning hosts
// connects at init to each peer on another host: 0 when it makes none
// (net_setup.cc says when), else the lane knob or kKernelLanesAcrossHosts
// (the ring setup may halve it to fit); ncclInvalidArgument for a bad
// FERRY_P2P_KERNEL_ACROSS_HOSTS.
[[nodiscard]] Status kernelLanesAcrossHosts(const Params& params, int nranks, int* lanes);

// The built-in socket engine (`engine`; others and null: nothing) connects
// every peer on another host at init: checks the open-file limit against
// what those connections take, raising the soft limit towards the hard one
// (INFO) or WARNing with the numbers. Once per communicator, by setupP2p;
// `links`: netLinksPerPeer's; `kernelLanes`: kernel p2p's lanes per remote
// peer that the ring setup will connect (0: none; kernelLanesAcrossHosts).
void checkNetDescriptorBudget(const P2pSetupContext& ctx, net::NetEngine* engine, int links,
                              int kernelLanes);

// The engine's devices (NICs) nearest to this rank's GPU by PCI path
// (topo/pci_locality.h): every device when the paths say nothing.
std::vector<int> nearNetDevices(net::NetEngine* engine, const Topology& t, int count);

// Which of the engine's devices (NICs) a connection uses: among the NICs
// nearest to this rank's GPU (as NCCL places each GPU on its nearest NIC),
// (spread + this rank's local index) modulo their count, so that a ring's
// channels (spread: the channel) and a rank's peers (spread: the peer) go
// over each of them, and the ranks of one host start on different ones.
// With no PCI paths known every NIC is nearest: the spread over all of
// them. 0 when the engine reports one device (or fails to).
int netDevFor(net::NetEngine* engine, const Topology& t, int spread);

// FERRY_NET_LINKS resolved: 1..kMaxNetLinks (0, the default: 2 on CUDA,
// 1 on the host runtime, where CI's two cores run many ranks' helper
// threads); ncclInvalidArgument outside [0, kMaxNetLinks].
[[nodiscard]] Status netLinksPerPeer(const P2pSetupContext& ctx, int* out);

// The receive side of peer -> me with `links` links: each listens on
// netDevFor(peer + link); handles->at(k) is link k's listen handle.
[[nodiscard]] Status setupNetRecv(const P2pSetupContext& ctx, net::NetEngine* engine, int peer,
                                  int links, std::unique_ptr<RecvConnection>* out,
                                  std::vector<NetHandle>* handles);

// The send side of me -> peer, not yet connected (connectNetPeers does).
[[nodiscard]] Status setupNetSend(const P2pSetupContext& ctx, net::NetEngine* engine, int peer,
                                  int links, std::unique_ptr<SendConnection>* out);

// Links 1..links-1 (nothing to do for one link): sends each peer this rank
// receives from over the network the listen handles of those links
// (recvExtra[peer], links - 1 of them), and receives from each peer it
// sends to the same into sendHandles[peer * links + 1 ...]. Collective
// between the two ends of every Net connection of `state`.
[[nodiscard]] Status exchangeNetHandles(const P2pSetupContext& ctx, int links,
                                        const std::vector<std::vector<NetHandle>>& recvExtra,
                                        const P2pState& state, std::vector<NetHandle>* sendHandles);

// Connects every Net connection of `state`: link k to peer q with
// handles[q * links + k] (this rank's writable copies of the receivers'
// handles), and accepts every receive link. Bounded by ctx.timeoutMs and ctx.abortFlag; on
// timeout ncclSystemError naming the peers still pending. Closes the listen
// comms of the connections it completes.
[[nodiscard]] Status connectNetPeers(const P2pSetupContext& ctx, int links,
                                     std::vector<NetHandle>& handles, P2pState* state);

}  // namespace ferry
