// What the API's communicator-creating functions share (init.cc, shrink.cc).
#pragma once

#include <functional>

#include "api/api.h"

namespace ferry {

// Everything a new rank needs that is read from the calling thread: the param
// snapshot, the resolved config, the runtime and its current device.
struct InitContext {
  Params params;
  CommConfig config;
  rt::Runtime* runtime = nullptr;
  int device = -1;
};

// Fills `out`; the config is the user's over `inherited` (or the defaults).
[[nodiscard]] Status makeContext(const ncclConfig_t* userConfig, const CommConfig* inherited,
                                 InitContext* out);
[[nodiscard]] Status checkRankArgs(ncclComm_t* comm, int nranks, int rank, const char* fn);
// Creates the communicator, publishes its handle, and runs (or defers) init.
[[nodiscard]] Status createAndInit(ncclComm_t* out, InitContext ctx, int nranks, int rank,
                                   std::function<Status(Communicator*)> initJob);
// A unique id with its own root thread. NCCL_COMM_ID names the address of the
// user's world communicator only: communicators Ferry makes internally (split,
// shrink, InitAll) must not reuse it.
[[nodiscard]] Status freshUniqueId(const Params& params, ncclUniqueId* id);
// Frees a handle (its communicator's destructor runs).
void destroyHandle(ncclComm_t handle);

}  // namespace ferry
