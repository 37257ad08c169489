// ncclGroupStart/End bookkeeping (thread-local, nestable, as in NCCL).
//
// Inside a group, communicator inits are deferred to the outermost
// ncclGroupEnd, which runs them concurrently (one process may init several
// ranks of one communicator, e.g. ncclCommInitAll). Later issues add
// collective and p2p tasks to the same group state.
//
// Threading: each thread has its own group state.
#pragma once

#include <functional>

#include "core/status.h"
#include "coll/coll_engine.h"
#include "enqueue/p2p_engine.h"

namespace ferry {

class Communicator;

// A collective step deferred to the group's end: a communicator's init
// (`run` must end in comm->runInit or comm->failInit) or a window
// registration (blocking). The group's blocking jobs run concurrently
// across communicators and in call order within one.
struct GroupJob {
  Communicator* comm = nullptr;
  bool blocking = true;
  std::function<Status()> run;
};

[[nodiscard]] Status groupStart();
// Ends one nesting level; at the outermost, runs every deferred job.
// Returns ncclInProgress when a non-blocking communicator's job was started
// in the background.
[[nodiscard]] Status groupEnd();
int groupDepth();
// ncclGroupSimulateEnd: ends one nesting level like groupEnd, but at the
// outermost the group's collectives and point-to-point tasks are not
// launched: *estimatedUs gets their estimated time (comm/cost_model.h; the
// slowest communicator of the group) and they are dropped. Deferred inits
// still run (their handles are already the user's). Nested levels give 0.
[[nodiscard]] Status groupSimulateEnd(float* estimatedUs);

// Collects a point-to-point task for the group's end (the caller opened a
// group around it when the user did not).
void groupAddP2p(Communicator* comm, const P2pTask& task);
// Collects a collective task likewise. At the group's end every
// communicator's collectives are launched (in call order) before its
// point-to-point tasks are issued.
void groupAddColl(Communicator* comm, const CollTask& task);

// Runs `job` now (outside a group: on this thread when blocking, on the
// communicator's init thread when not) or defers it to the group's end.
[[nodiscard]] Status groupSubmit(GroupJob job);

}  // namespace ferry
