#include "common/proc.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "core/env.h"

namespace ferry::test {

int countOpenFds() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir.get())) {
    if (entry->d_name[0] != '.') ++count;
  }
  return count - 1;  // the directory stream's own descriptor
}

namespace {

// Integer value of "<key>:" in /proc/self/status; -1 when absent.
long statusField(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

// Parses a whole non-negative decimal variable; false when unset or malformed.
bool envInt(const char* name, int* out, std::string* error) {
  std::string text = ferry::envString(name);
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 0 || value > 1 << 30) {
    *error = std::string(name) + (text.empty() ? " is not set" : " is malformed: '" + text + "'");
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

// FERRY_TEST_RANK_ENV="R:NAME=VALUE|R:NAME=VALUE...": rank R puts NAME=VALUE
// in its own environment, for tests of knobs that ranks set differently.
bool applyRankEnv(int rank, std::string* error) {
  const std::string spec = ferry::envString("FERRY_TEST_RANK_ENV");
  size_t start = 0;
  while (start < spec.size()) {
    size_t end = spec.find('|', start);
    if (end == std::string::npos) end = spec.size();
    const std::string entry = spec.substr(start, end - start);
    start = end + 1;
    size_t colon = entry.find(':');
    size_t eq = entry.find('=', colon == std::string::npos ? 0 : colon);
    if (colon == std::string::npos || eq == std::string::npos || colon == 0 || eq == colon + 1) {
      *error = "FERRY_TEST_RANK_ENV entry '" + entry + "' is not RANK:NAME=VALUE";
      return false;
    }
    if (std::atoi(entry.substr(0, colon).c_str()) != rank) continue;
    const std::string name = entry.substr(colon + 1, eq - colon - 1);
    setenv(name.c_str(), entry.substr(eq + 1).c_str(), 1);
  }
  return true;
}

}  // namespace

int countThreads() {
  return static_cast<int>(statusField("Threads"));
}

long rssKiB() {
  return statusField("VmRSS");
}

bool readLaunchEnv(LaunchEnv* env, std::string* error) {
  if (!envInt("FERRY_RANK", &env->rank, error) || !envInt("FERRY_NRANKS", &env->nranks, error) ||
      !envInt("LOCAL_RANK", &env->localRank, error) ||
      !envInt("LOCAL_WORLD_SIZE", &env->localNranks, error)) {
    return false;
  }
  std::string ignored;
  if (!envInt("FERRY_DEVICE", &env->device, &ignored)) env->device = -1;
  env->commId = ferry::envString("NCCL_COMM_ID");
  env->runtime = ferry::envString("FERRY_RUNTIME");
  if (env->nranks < 1 || env->rank >= env->nranks || env->localRank >= env->localNranks) {
    *error = "FERRY_RANK/FERRY_NRANKS/LOCAL_RANK/LOCAL_WORLD_SIZE are inconsistent";
    return false;
  }
  if (env->commId.empty()) {
    *error = "NCCL_COMM_ID is not set";
    return false;
  }
  return applyRankEnv(env->rank, error);
}

LaunchEnv launchEnv() {
  LaunchEnv env;
  std::string error;
  if (!readLaunchEnv(&env, &error)) {
    fprintf(stderr, "%s: run this program under ferry-run -n N\n", error.c_str());
    std::exit(2);
  }
  return env;
}

}  // namespace ferry::test
