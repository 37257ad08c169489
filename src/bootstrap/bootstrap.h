// Bootstrap: out-of-band TCP rendezvous that forms a communicator's ranks
// before any device transport exists (DESIGN.md layer 3).
//
// Flow: ncclGetUniqueId starts a root thread (or, with NCCL_COMM_ID, rank 0
// starts it at that address) and encodes root address + random magic in the
// id. Each rank opens its own listen socket, sends {magic, rank, nranks, its
// listen address} to the root, receives the address of its ring successor,
// and the ranks then all-gather every listen address around the ring. After
// that the layers above use allGather / send / recv / barrier.
//
// Robustness: every message is framed (bootstrap/wire.h) and checked;
// a stranger, wrong magic, garbage or truncated message on any socket is
// dropped with a WARN and never disturbs the real ranks. Every wait polls
// with a deadline (options.timeoutMs) and the abort flag, so nothing blocks
// forever. Error codes: a wait past its deadline -> ncclSystemError (WARN
// says "timed out" and what it waited for); *abortFlag set -> ncclInternalError
// within ~100 ms; a peer that closed its end -> ncclRemoteError.
//
// Threading: one Bootstrap is used by one thread at a time (its owner).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "bootstrap/socket.h"
#include "core/params.h"
#include "core/status.h"

namespace ferry::boot {

struct BootstrapOptions {
  int64_t timeoutMs = 120000;                    // every wait's deadline
  const std::atomic<bool>* abortFlag = nullptr;  // polled at least every 100 ms
  std::string ifname;                            // NCCL_SOCKET_IFNAME syntax
  std::string family;                            // "", "AF_INET", "AF_INET6"
  int staggerRanks = 128;                        // above this, connects to root are staggered
  std::string commId;                            // NCCL_COMM_ID ("" when unset)

  static BootstrapOptions fromParams(const Params& p);
};

// Fills `id` with a fresh magic and the root's address, and starts a root
// thread that serves one communicator (any nranks) and then exits. With
// NCCL_COMM_ID set (options.commId), no thread starts: the id names that
// address and rank 0 serves the root when it calls Bootstrap::create.
[[nodiscard]] Status createUniqueId(const BootstrapOptions& options, ncclUniqueId* id);
// A unique id with its own root thread, for a communicator Ferry makes from
// another (split, shrink, InitAll, the hierarchical all-reduce's): NCCL_COMM_ID
// names the address of the user's world communicator only, never these.
[[nodiscard]] Status createFreshUniqueId(const Params& params, ncclUniqueId* id);

// Human-readable "addr:port magic=..." for logs.
std::string describeUniqueId(const ncclUniqueId& id);

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  // Collective over all `nranks` ranks holding `id`. Returns when every rank
  // knows every other rank's listen address.
  [[nodiscard]] static Status create(const ncclUniqueId& id, int rank, int nranks,
                                     const BootstrapOptions& options,
                                     std::unique_ptr<Bootstrap>* out);
  // ncclCommInitRankScalable: `nId` ids (1..nranks, the same on every rank,
  // in the same order), root k serving ranks [k*nranks/nId, (k+1)*nranks/nId).
  // Identical ids count as one.
  [[nodiscard]] static Status createScalable(const ncclUniqueId* ids, int nId, int rank, int nranks,
                                             const BootstrapOptions& options,
                                             std::unique_ptr<Bootstrap>* out);

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // This rank's listen address: its IP is the interface the bootstrap chose
  // (NCCL_SOCKET_IFNAME), which other side channels reuse.
  virtual const SocketAddress& listenAddress() const = 0;

  // data holds nranks slots of `bytesPerRank`; this rank's slot is filled on
  // entry, every slot on return. Collective.
  [[nodiscard]] virtual Status allGather(void* data, size_t bytesPerRank) = 0;
  // Tagged point-to-point. Messages from one peer with one tag arrive in
  // order; recv must name the exact size the sender sent (else an error).
  // send returns once the message is handed to the kernel's socket buffer or
  // the peer has taken it; it never waits for a matching recv to be posted.
  [[nodiscard]] virtual Status send(int peer, uint32_t tag, const void* data, size_t bytes) = 0;
  [[nodiscard]] virtual Status recv(int peer, uint32_t tag, void* data, size_t bytes) = 0;
  // Collective: returns when every rank has entered.
  [[nodiscard]] virtual Status barrier() = 0;
};

// Tags below this are reserved for the bootstrap itself.
constexpr uint32_t kUserTagBase = 0x100;

}  // namespace ferry::boot
