// The built-in socket network engine (NCCL_NET=Socket): NetEngine over TCP.
//
// Shape of one connection (sender -> receiver):
//   - one control socket: the sender announces each message there (size and
//     sequence number) in isend order;
//   - NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD data sockets: a message's
//     bytes are cut into chunks (at least 64 KiB, at most one per socket) and
//     spread round-robin over them; on each side a helper thread per group
//     of NCCL_NSOCKS_PERTHREAD sockets (one of the engine's shared helpers,
//     FERRY_NET_SHARED_HELPERS, or the connection's own) moves the chunks,
//     so the proxy thread only posts work and polls counters;
//   - except a message of at most 64 KiB (kInlineBytes): its bytes follow
//     its announcement on the control socket, moved by the proxy thread
//     itself (a helper thread's wake-up on each side would cost more than
//     the bytes).
// Every socket starts with a hello (magic, version, connection id, index,
// count) so the listener can sort the sockets of concurrent connections and
// drop strangers; the receiver mirrors the sender's thread/socket layout.
//
// Devices are the interfaces NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY select
// (the bootstrap's matching rules, one device per interface name; loopback
// when the rules name it or nothing else exists).
//
// Threading: as NetEngine says (one proxy thread per engine and its comms);
// helper threads are private to each send/recv comm and are joined by
// closeSend/closeRecv, or (FERRY_NET_SHARED_HELPERS) the engine's, shared by
// all its comms, each of which lets go of them when it closes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/ifaddr.h"
#include "core/params.h"
#include "core/status.h"
#include "net/net.h"

namespace ferry::net {

// Timeouts of the connection set-up (defaults suit real networks, tests
// shrink them to watch strangers being dropped) and the helpers' spin.
struct SocketNetTuning {
  // A socket accepted by the listener must deliver its whole hello this soon.
  int64_t helloTimeoutMs = 10000;
  // All sockets of one connection must have arrived this soon after the first.
  int64_t groupTimeoutMs = 30000;
  // connect() gives up (ncclSystemError) when the peer cannot be reached by then.
  int64_t connectTimeoutMs = 30000;
  // How long a helper thread keeps polling after its last progress before
  // it sleeps; negative: FERRY_NET_HELPER_SPIN_US.
  int64_t helperSpinUs = -1;
  // Helper threads shared by every connection of the engine (0: each
  // connection has its own); negative: FERRY_NET_SHARED_HELPERS.
  int sharedHelpers = -1;
  // Processes of the creating communicator's ranks on this host (this one
  // included), each of which may start helpers of its own (helperCpuBudget).
  int processesOnHost = 1;
};

// The CPUs the automatic helper settings count on: the process's affinity
// mask (`maskCpus`), shared with the other processes on this host when
// their masks must overlap, i.e. when together they claim more CPUs than
// the machine has online (unbound processes all see every CPU); a process
// bound to its own share keeps it. At least 1.
int helperCpuBudget(int maskCpus, int onlineCpus, int processesOnHost);

// Helper threads per connection and data sockets per thread, from
// NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD: 0 means the default (4
// threads, 2 sockets each); a value outside 1..16, or a product above 64,
// is reported with a WARN and replaced by the defaults (4 x 2).
struct SocketNetLayout {
  int nThreads = 4;
  int nSocksPerThread = 2;
};
SocketNetLayout resolveSocketNetLayout(const Params& params);

// The helper settings an engine uses: each negative field of `given` comes
// from its knob (FERRY_NET_HELPER_SPIN_US, FERRY_NET_SHARED_HELPERS), whose
// -1 means automatic for a budget of `cores` CPUs (helperCpuBudget): shared
// helpers, a quarter of the cores (2..8), spinning 500 us with 16 cores or
// more and not at all below. Values out of range WARN and count as -1.
SocketNetTuning resolveSocketNetTuning(const Params& params, SocketNetTuning given, int cores);

// The devices among `all` (bootstrap::listInterfaces order): one entry per
// interface name whose name matches `spec` and whose address family matches
// `family` (AF_UNSPEC: any), the first such address of each; with an empty
// spec and no match, the first loopback address. Empty when nothing fits.
std::vector<boot::InterfaceAddress> selectSocketNetDevices(
    const std::vector<boot::InterfaceAddress>& all, const std::string& spec, int family);

// The engine. ncclSystemError (with a WARN listing the interfaces) when no
// interface fits; ncclInvalidArgument for a malformed NCCL_SOCKET_FAMILY.
[[nodiscard]] Status createSocketNet(const Params& params, std::unique_ptr<NetEngine>* out);
[[nodiscard]] Status createSocketNet(const Params& params, const SocketNetTuning& tuning,
                                     std::unique_ptr<NetEngine>* out);

// Introspection for tests and logs: the layout a send or recv comm of the
// socket engine uses (a receiver reports its sender's layout).
SocketNetLayout socketNetCommLayout(const void* comm);

// How many times, process-wide, a helper thread slept through its whole
// poll timeout (200 ms) while work was posted to it: a lost wake-up, which
// costs that timeout. Tests expect none.
uint64_t socketNetLateWakeups();

}  // namespace ferry::net
