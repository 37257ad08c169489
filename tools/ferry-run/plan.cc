#include "plan.h"

#include <set>

namespace ferry::run {

std::vector<std::string> visibleGpus(bool cvdSet, const std::string& cvd, int procGpuCount) {
  std::vector<std::string> gpus;
  if (cvdSet) {
    // CUDA stops at the first invalid entry; we cannot validate here, so every
    // non-empty comma-separated entry counts (indices, GPU-/MIG- UUIDs).
    size_t start = 0;
    while (start <= cvd.size()) {
      size_t comma = cvd.find(',', start);
      if (comma == std::string::npos) comma = cvd.size();
      std::string entry = cvd.substr(start, comma - start);
      while (!entry.empty() && entry.front() == ' ') entry.erase(entry.begin());
      while (!entry.empty() && entry.back() == ' ') entry.pop_back();
      if (!entry.empty()) gpus.push_back(entry);
      start = comma + 1;
    }
    return gpus;
  }
  for (int i = 0; i < procGpuCount; ++i) gpus.push_back(std::to_string(i));
  return gpus;
}

bool usesGpus(const Options& opts, const HostFacts& facts) {
  if (opts.runtime == RuntimeChoice::Cuda) return true;
  return opts.runtime == RuntimeChoice::Auto && !facts.gpus.empty();
}

std::string checkPlan(const Options& opts, const HostFacts& facts) {
  if (opts.runtime == RuntimeChoice::Cuda && facts.gpus.empty()) {
    return "--runtime cuda but no GPU found (CUDA_VISIBLE_DEVICES unset or empty and no "
           "entries in /proc/driver/nvidia/gpus)";
  }
  if (opts.isolateGpus && !usesGpus(opts, facts)) {
    return "--isolate-gpus needs GPUs, and this launch uses the host runtime";
  }
  return "";
}

std::vector<EnvPair> rankEnvironment(const Options& opts, const HostFacts& facts, int rank) {
  const std::string r = std::to_string(rank);
  const std::string n = std::to_string(opts.nranks);
  std::vector<EnvPair> env = {
      {"NCCL_COMM_ID", "127.0.0.1:" + std::to_string(facts.commPort)},
      {"FERRY_RANK", r},
      {"FERRY_NRANKS", n},
      {"RANK", r},
      {"WORLD_SIZE", n},
      {"LOCAL_RANK", r},
      {"LOCAL_WORLD_SIZE", n},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(facts.masterPort)},
  };
  if (opts.hosts > 0) {
    // Contiguous runs of ranks per emulated host, as a launcher that
    // fills each node in turn would place them.
    const long host = static_cast<long>(rank) * opts.hosts / opts.nranks;
    env.emplace_back("NCCL_HOSTID", "ferry-run-host" + std::to_string(host));
  }
  if (opts.runtime == RuntimeChoice::Host) env.emplace_back("FERRY_RUNTIME", "host");
  if (opts.runtime == RuntimeChoice::Cuda) env.emplace_back("FERRY_RUNTIME", "cuda");
  if (usesGpus(opts, facts) && !facts.gpus.empty()) {
    size_t gpu = static_cast<size_t>(rank) % facts.gpus.size();
    if (opts.isolateGpus) {
      // Only this GPU is visible to the rank, so it is device 0 there.
      env.emplace_back("CUDA_VISIBLE_DEVICES", facts.gpus[gpu]);
      env.emplace_back("FERRY_DEVICE", "0");
    } else {
      env.emplace_back("FERRY_DEVICE", std::to_string(gpu));
    }
  } else {
    int devices = facts.hostDevices > 0 ? facts.hostDevices : 1;
    env.emplace_back("FERRY_DEVICE", std::to_string(rank % devices));
  }
  return env;
}

std::vector<std::string> mergeEnvironment(const std::vector<std::string>& base,
                                          const std::vector<EnvPair>& overrides) {
  std::set<std::string> replaced;
  for (const EnvPair& kv : overrides) replaced.insert(kv.first);
  std::vector<std::string> merged;
  merged.reserve(base.size() + overrides.size());
  for (const std::string& entry : base) {
    std::string name = entry.substr(0, entry.find('='));
    if (replaced.count(name) == 0) merged.push_back(entry);
  }
  for (const EnvPair& kv : overrides) merged.push_back(kv.first + "=" + kv.second);
  return merged;
}

}  // namespace ferry::run
