// Internal communicators: made by a parent communicator, out of some of its
// ranks, the first time an algorithm needs one (the hierarchical
// all-reduce's per-host and per-index rings, the window collectives' own
// point-to-point connections). Every member reaches the call at the same
// point of its parent's sequence (the choice that leads there depends only
// on what every rank agrees on), so the parent's bootstrap carries the new
// unique id from the first member to the others under `tag`.
//
// The internal communicator has no liveness ring of its own (the parent's
// watches every rank); a peer failure it sees is reported to the parent,
// with `what` saying which algorithm lost it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/status.h"

namespace ferry {

class Communicator;

// Makes and initializes it. `members`: parent ranks, the same list on every
// member; `params`: the parent's, with whatever the algorithm changes.
// *slot is set (under `mu`, before init) so that an abort from another
// thread can stop the init; collectivesOnly: no point-to-point connections.
[[nodiscard]] Status makeInternalComm(Communicator* parent, const std::vector<int>& members,
                                      uint32_t tag, const Params& params, bool collectivesOnly,
                                      const std::string& what, std::mutex& mu,
                                      std::unique_ptr<Communicator>* slot);

}  // namespace ferry
