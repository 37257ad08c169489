// Process facts for leak checks, and the launcher's variables for test
// programs started by ferry-run.
//
// Leak checks: take countOpenFds()/countThreads() before creating and after
// destroying communicators; a difference is a leak (allow for threads that
// exit asynchronously by polling a little).
#pragma once

#include <string>

namespace ferry::test {

// Open descriptors of this process (/proc/self/fd, excluding the one used to
// read it); -1 if /proc is unreadable.
int countOpenFds();
// Threads of this process ("Threads:" in /proc/self/status); -1 on error.
int countThreads();
// Resident set size in KiB ("VmRSS:" in /proc/self/status); -1 on error.
long rssKiB();

// What ferry-run puts in every rank's environment.
struct LaunchEnv {
  int rank = -1;        // FERRY_RANK
  int nranks = 0;       // FERRY_NRANKS
  int localRank = -1;   // LOCAL_RANK
  int localNranks = 0;  // LOCAL_WORLD_SIZE
  int device = -1;      // FERRY_DEVICE: the device to select (-1 if unset)
  std::string commId;   // NCCL_COMM_ID (host:port of the bootstrap root)
  std::string runtime;  // FERRY_RUNTIME ("" when ferry-run was not given --runtime)
};

// Reads the variables; false with the reason when they are missing or
// inconsistent (e.g. the program was not started by ferry-run). Then applies
// this rank's entries of FERRY_TEST_RANK_ENV ("R:NAME=VALUE|..."): rank R
// sets NAME=VALUE in its environment (knobs that differ between ranks).
bool readLaunchEnv(LaunchEnv* env, std::string* error);

// readLaunchEnv or, on failure, prints "<reason>: run this program under
// ferry-run -n N" to stderr and exits with status 2.
LaunchEnv launchEnv();

}  // namespace ferry::test
