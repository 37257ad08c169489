// The bootstrap root: a thread that collects one hello per rank and tells
// every rank the listen address of its ring successor, then exits.
//
// State machine (one poll() loop over the listen socket and every accepted
// connection): an accepted connection must deliver a whole, valid RootHello
// frame before its own deadline (min(5 s, root time left)); garbage, a wrong
// magic, a truncated or slow message is dropped with a WARN and never delays
// the others. nranks is taken from the first valid hello; a hello with another
// nranks or an already-registered rank is rejected (WARN, connection closed).
// A registered rank that disconnects is unregistered (it may come back).
// When all nranks have arrived each gets RootReply{successor} and the root
// exits. On its deadline (BootstrapOptions::timeoutMs from start) it WARNs
// which ranks never arrived and exits, closing every connection, so waiting
// ranks fail with ncclRemoteError instead of waiting out their own timeout.
//
// Lifetime: every root thread is kept in a process-wide registry.
// joinFinishedRoots() joins the ones that have exited (createUniqueId calls
// it, so at most the still-serving roots stay alive); at process exit an
// atexit handler asks all roots to stop (seen within 100 ms) and joins them.
// In a child created by fork() the inherited registry is forgotten (its
// threads do not exist there); the inherited fds are left to the child's exit.
#pragma once

#include <cstdint>

#include "bootstrap/socket.h"
#include "core/status.h"

namespace ferry::boot {

// Starts a root thread serving `listen` (already listening). Takes ownership.
[[nodiscard]] Status startRoot(Socket listen, uint64_t magic, int64_t timeoutMs);

// Joins every root thread that has finished. Thread-safe.
void joinFinishedRoots();

// Roots started and not yet joined (tests use it to check for leaks).
size_t liveRootCount();

}  // namespace ferry::boot
