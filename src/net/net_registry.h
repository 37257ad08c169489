// The process's network engine (DESIGN.md layer 4): one NetEngine per
// process, shared by every communicator that has peers on other hosts, as
// NCCL initializes its net plugin once per process.
//
// Which engine (the first communicator that asks decides, from its Params):
//   - NCCL_NET empty, or naming a plugin: the net plugin NCCL_NET_PLUGIN
//     selects (net/plugin.h); when none loads (missing, failed, or named
//     differently: the loader already said why), the built-in Socket engine;
//   - NCCL_NET=Socket (any case): the built-in Socket engine, no plugin;
//   - NCCL_NET naming neither: ncclInvalidArgument, listing what exists.
// A later communicator whose NCCL_NET asks for another engine gets the
// existing one, with a WARN.
//
// Threading: processNetEngine may be called from any thread. The engine it
// hands out serializes every call with a mutex, so the communicators of one
// process (each initializing on its own thread) may share it although
// NetEngine itself allows one thread at a time.
#pragma once

#include "core/params.h"
#include "core/status.h"
#include "net/net.h"

namespace ferry {

// The process's engine, created on the first call. On failure nothing is
// kept, so a later call tries again. The engine lives until the process
// ends and is never destroyed (net_registry.cc says why). `processesOnHost`:
// the processes of the calling communicator's ranks on this host, whose
// engines' helper threads share its CPUs (net/socket_net.h,
// helperCpuBudget).
[[nodiscard]] Status processNetEngine(const Params& params, int processesOnHost,
                                      net::NetEngine** out);

// Whether the engine processNetEngine gave out is the built-in sockets (not a
// net plugin); false before it gave one out.
bool processNetEngineIsBuiltIn();

// "NET/<engine name>" (e.g. "NET/Socket") once the engine exists, else "NET".
// The text stays valid for the life of the process.
const char* processNetTransportName();

}  // namespace ferry
