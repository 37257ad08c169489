// Starting rank processes and finding free ports.
//
// Threading: the launcher is single-threaded; spawnRank forks, so it must not
// be called while other threads run (the child only uses async-signal-safe
// calls between fork and exec, all inputs prepared by the parent).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "fd.h"

namespace ferry::run {

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;  // also the rank's process group id
  UniqueFd out;    // read end of the rank's stdout pipe (non-blocking)
  UniqueFd err;    // read end of the rank's stderr pipe (non-blocking)
};

// Starts `argv` (PATH searched) with environment `env` as rank `rank`, in a
// new process group of its own so that signals reach its children too. The
// child dies with SIGKILL if the launcher dies (PR_SET_PDEATHSIG), gets
// `childMask` as its signal mask and default dispositions for the signals
// the launcher handles. Ranks other than 0 read stdin from /dev/null.
// On failure returns false with the reason in `error`.
bool spawnRank(int rank, const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const sigset_t& childMask, RankProcess* proc, std::string* error);

// Two distinct free TCP ports on 127.0.0.1 (bind port 0, read it, close).
// Another process could take them before the ranks bind them; the window is
// short and the failure is loud (rank 0 cannot listen).
bool pickFreePorts(int* first, int* second, std::string* error);

// Number of GPUs the NVIDIA driver lists in /proc/driver/nvidia/gpus (0 if none).
int countProcGpus();

}  // namespace ferry::run
