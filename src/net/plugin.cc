// The net plugin loader: NCCL_NET_PLUGIN's names -> dlopen -> the newest
// ncclNetPlugin_vN -> NCCL_NET name check -> init -> an engine (see plugin.h
// for the rules, plugin_engine.cc for the adapters).
#include "net/plugin.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "core/log.h"
#include "net/plugin_engine.h"

namespace ferry::net {

namespace {

// NCCL_NET_PLUGIN=STATIC_PLUGIN: the plugin is linked into the program
// itself, so the symbols are looked up in the main executable's scope.
constexpr const char* kStaticPluginName = "STATIC_PLUGIN";

constexpr int kNewestVersion = 11;
constexpr int kOldestVersion = 6;

bool looksLikeLibraryFile(const std::string& entry) {
  const std::string suffix = ".so";
  return entry.rfind("lib", 0) == 0 && entry.size() >= suffix.size() &&
         entry.compare(entry.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How one NCCL_NET_PLUGIN entry fared.
enum class Outcome {
  Loaded,
  NotFound,  // no candidate file exists: quiet when it was only the default
  Skipped,   // loaded, but named differently from NCCL_NET: quiet, as in NCCL
  Failed,    // exists but cannot be used: always worth a WARN
};

struct Attempt {
  Outcome outcome = Outcome::Failed;
  std::string reason;
  std::unique_ptr<PluginNetEngine> engine;
};

std::string formatText(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string formatText(const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return text;
}

// Where the dynamic loader found `handle` (for logs), else `fallback`.
std::string libraryPath(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

// Opens the first of the candidate's files that dlopen accepts. NotFound
// only when every file is simply absent; any other dlopen error (a missing
// dependency, an undefined symbol) is a failure worth reporting.
Outcome openLibrary(const NetPluginCandidate& candidate, SharedLibrary* lib, std::string* path,
                    std::string* reason) {
  bool allAbsent = true;
  for (const std::string& file : candidate.files) {
    bool isStatic = strcasecmp(file.c_str(), kStaticPluginName) == 0;
    void* handle = dlopen(isStatic ? nullptr : file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      *lib = SharedLibrary(handle);
      *path = isStatic ? std::string("(the program itself)") : libraryPath(handle, file);
      return Outcome::Loaded;
    }
    const char* error = dlerror();
    std::string text = error != nullptr ? error : file + ": dlopen failed";
    if (text.find("No such file or directory") == std::string::npos ||
        text.find(file) == std::string::npos) {
      allAbsent = false;
    }
    if (!reason->empty()) *reason += "; ";
    *reason += text;
  }
  return allAbsent ? Outcome::NotFound : Outcome::Failed;
}

// The newest table the library exports, as NCCL 2.28 picks it.
const void* findTable(void* handle, int* version) {
  for (int v = kNewestVersion; v >= kOldestVersion; --v) {
    char symbol[32];
    snprintf(symbol, sizeof(symbol), "ncclNetPlugin_v%d", v);
    const void* table = dlsym(handle, symbol);
    if (table != nullptr) {
      *version = v;
      return table;
    }
  }
  return nullptr;
}

// The checks NCCL makes after init before it assigns a plugin to a
// communicator, plus the one Ferry adds (no device offload).
Status checkUsable(PluginNetEngine* engine, std::string* reason) {
  int count = 0;
  Status s = engine->devices(&count);
  if (!ok(s) || count <= 0) {
    *reason = ok(s) ? "reports no devices" : formatText("devices() failed: %s", statusString(s));
    return ncclSystemError;
  }
  int offload = abi::NCCL_NET_DEVICE_HOST;
  s = engine->offloadType(0, &offload);
  if (!ok(s)) {
    *reason = formatText("getProperties(0) failed: %s", statusString(s));
    return s;
  }
  if (offload != abi::NCCL_NET_DEVICE_HOST) {
    *reason = formatText(
        "device 0 needs GPU-side offload (netDeviceType %d), which Ferry does not provide",
        offload);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

Attempt tryCandidate(const NetPluginCandidate& candidate, const std::string& wantedName,
                     const NetPluginInitArgs& args) {
  Attempt attempt;
  SharedLibrary lib;
  std::string path;
  attempt.outcome = openLibrary(candidate, &lib, &path, &attempt.reason);
  if (attempt.outcome != Outcome::Loaded) return attempt;

  attempt.outcome = Outcome::Failed;
  int version = 0;
  const void* table = findTable(lib.get(), &version);
  if (table == nullptr) {
    attempt.reason = formatText("%s exports none of ncclNetPlugin_v%d .. ncclNetPlugin_v%d",
                                path.c_str(), kNewestVersion, kOldestVersion);
    return attempt;
  }
  std::unique_ptr<PluginNetEngine> engine =
      makePluginNetEngine(version, table, std::move(lib), args);
  engine->setLibraryPath(path);
  const char* name = engine->name();
  // NCCL compares names before init, so a plugin that is not wanted is
  // never initialized.
  if (!wantedName.empty() && strcasecmp(wantedName.c_str(), name) != 0) {
    attempt.outcome = Outcome::Skipped;
    attempt.reason = formatText("%s holds net plugin '%s', not NCCL_NET=%s", path.c_str(), name,
                                wantedName.c_str());
    return attempt;
  }
  Status s = engine->start();
  if (!ok(s)) {
    attempt.reason = formatText("init of net plugin '%s' (v%d, %s) failed: %s", name, version,
                                path.c_str(), statusString(s));
    return attempt;
  }
  std::string unusable;
  if (!ok(checkUsable(engine.get(), &unusable))) {
    attempt.reason =
        formatText("net plugin '%s' (v%d, %s) %s", name, version, path.c_str(), unusable.c_str());
    return attempt;
  }
  FERRY_INFO(kLogInit | kLogNet, "NET/Plugin: using net plugin '%s' (ncclNetPlugin_v%d) from %s",
             name, version, path.c_str());
  attempt.outcome = Outcome::Loaded;
  attempt.engine = std::move(engine);
  return attempt;
}

}  // namespace

std::vector<NetPluginCandidate> netPluginCandidates(const std::string& value) {
  if (strcasecmp(value.c_str(), "none") == 0) return {};
  if (value.empty()) return {NetPluginCandidate{"", {kDefaultNetPluginLib}}};
  std::vector<NetPluginCandidate> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    std::string entry = value.substr(start, comma - start);
    start = comma + 1;
    if (entry.empty()) continue;
    NetPluginCandidate candidate{entry, {entry}};
    // A bare name N also means libnccl-net-N.so; a path or a library file
    // name is taken only as written.
    if (entry.find('/') == std::string::npos && !looksLikeLibraryFile(entry)) {
      candidate.files.push_back("libnccl-net-" + entry + ".so");
    }
    out.push_back(std::move(candidate));
  }
  return out;
}

Status loadNetPlugin(const Params& params, std::unique_ptr<NetEngine>* out, std::string* why) {
  return loadNetPlugin(params, NetPluginInitArgs{}, out, why);
}

Status loadNetPlugin(const Params& params, const NetPluginInitArgs& args,
                     std::unique_ptr<NetEngine>* out, std::string* why) {
  out->reset();
  std::string reasons;
  const std::string& value = params.getString(ParamId::NetPlugin);
  const std::string& wanted = params.getString(ParamId::Net);
  std::vector<NetPluginCandidate> candidates = netPluginCandidates(value);
  if (candidates.empty()) {
    reasons = "no net plugin: NCCL_NET_PLUGIN=" + value;
    FERRY_INFO(kLogInit | kLogNet, "NET/Plugin: %s; using the built-in Socket engine",
               reasons.c_str());
    if (why != nullptr) *why = reasons;
    return ncclSuccess;
  }
  bool loud = false;
  for (const NetPluginCandidate& candidate : candidates) {
    Attempt attempt = tryCandidate(candidate, wanted, args);
    if (attempt.outcome == Outcome::Loaded) {
      *out = std::move(attempt.engine);
      if (why != nullptr) why->clear();
      return ncclSuccess;
    }
    // An absent default library is the normal case; an absent library the
    // user named, or one that exists but fails, deserves a WARN.
    if (attempt.outcome == Outcome::Failed) loud = true;
    if (attempt.outcome == Outcome::NotFound && !value.empty()) loud = true;
    if (!reasons.empty()) reasons += "; ";
    reasons += attempt.reason;
  }
  if (loud) {
    FERRY_WARN("NET/Plugin: not using a net plugin (%s); using the built-in Socket engine",
               reasons.c_str());
  } else {
    FERRY_INFO(kLogInit | kLogNet,
               "NET/Plugin: no net plugin (%s); using the built-in Socket engine", reasons.c_str());
  }
  if (why != nullptr) *why = reasons;
  return ncclSuccess;
}

int netPluginVersion(const NetEngine& engine) {
  const auto* plugin = dynamic_cast<const PluginNetEngine*>(&engine);
  return plugin != nullptr ? plugin->version() : 0;
}

std::string netPluginPath(const NetEngine& engine) {
  const auto* plugin = dynamic_cast<const PluginNetEngine*>(&engine);
  return plugin != nullptr ? plugin->libraryPath() : std::string();
}

}  // namespace ferry::net
