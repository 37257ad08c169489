// --compare: runs the sweep once per library, each in its own child process
// (this program re-executed with --lib X --json-out FILE --seed S), one after
// the other, then merges the results into one side-by-side table.
//
// Under a launcher every rank does this in lockstep. Bootstrap ports: the
// parents never form a communicator; process rank 0 listens on the launcher's
// NCCL_COMM_ID port as a small rendezvous (rendezvous.h), picks a free port
// for each child run and sends it to the others, which give their child
// NCCL_COMM_ID=<same host>:<that port>. After each child the ranks exchange
// exit codes (a barrier), so the second library starts only when every rank
// is done with the first.
#pragma once

#include "ferry_bench/args.h"
#include "ferry_bench/launch_env.h"

namespace ferry::bench {

// Returns the exit code of the whole comparison (the worst child's).
int runCompare(const Options& options, const LaunchEnv& env, uint64_t seed);

}  // namespace ferry::bench
