#include "ferry_bench/launch_env.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace ferry::bench {
namespace {

int envInt(const char* primary, const char* fallback, int otherwise) {
  const char* v = getenv(primary);
  if (v == nullptr && fallback != nullptr) v = getenv(fallback);
  if (v == nullptr || *v == '\0') return otherwise;
  char* end = nullptr;
  const long n = strtol(v, &end, 10);
  return *end == '\0' ? static_cast<int>(n) : otherwise;
}

uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

LaunchEnv readLaunchEnv() {
  LaunchEnv e;
  e.rank = envInt("RANK", "FERRY_RANK", 0);
  e.world = envInt("WORLD_SIZE", "FERRY_NRANKS", 1);
  e.localRank = envInt("LOCAL_RANK", nullptr, e.rank);
  e.device = envInt("FERRY_DEVICE", nullptr, -1);
  const char* id = getenv("NCCL_COMM_ID");
  if (id != nullptr) e.commId = id;
  return e;
}

uint64_t defaultSeed(const LaunchEnv& env) {
  if (env.launched()) {
    const char* master = getenv("MASTER_PORT");
    return fnv1a(env.commId + "/" + (master != nullptr ? master : "")) & 0xffffffffffffull;
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  return (static_cast<uint64_t>(now) ^ (static_cast<uint64_t>(getpid()) << 20)) & 0xffffffffffffull;
}

bool splitHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char* end = nullptr;
  const long p = strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) return false;
  *host = h;
  *port = static_cast<int>(p);
  return true;
}

}  // namespace ferry::bench
