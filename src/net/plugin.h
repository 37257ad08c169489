// NCCL net plugins: finding, loading and adapting the network libraries
// NCCL 2.28 loads (aws-ofi-nccl, nccl-rdma-sharp-plugins, GCP's ...), so they
// work under Ferry unchanged.
//
// Which library (NCCL_NET_PLUGIN, the rules of NCCL 2.28):
//   - unset or empty: libnccl-net.so, found through the dynamic loader's
//     search path; its absence is normal and logged at INFO only;
//   - "none" (any case): no plugin;
//   - otherwise a comma-separated list, tried in order until one library
//     loads, initializes and (when NCCL_NET names an engine) carries that
//     name. Each entry is first given to dlopen as written (a path when it
//     contains '/', else a file name the loader searches for); unless it
//     contains '/' or already looks like a library ("lib*.so"), the entry N
//     is then also tried as libnccl-net-N.so.
// Then (NCCL's order): the library must export one of ncclNetPlugin_v11 ..
// ncclNetPlugin_v6 (the newest found wins); its name must match NCCL_NET
// (case-insensitive) when NCCL_NET is set; init must succeed; devices() must
// report at least one device; device 0 must not need GPU-side offload
// (Ferry has no unpack kernel). Any failure leaves the plugin unused and
// Ferry on its built-in Socket engine.
//
// Plugins of v6 .. v10 were designed to be initialized once per process:
// Ferry calls their init only for the first engine of a loaded library and
// again only after every engine of it is gone. v11 plugins get one init
// (and one finalize) per engine, with the engine's own context.
//
// Threading: loadNetPlugin may be called from any thread; the engine it
// returns follows NetEngine's rules (one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/status.h"
#include "net/net.h"

namespace ferry::net {

// The library NCCL (and Ferry) look for when NCCL_NET_PLUGIN is not set.
constexpr const char* kDefaultNetPluginLib = "libnccl-net.so";

// One entry of NCCL_NET_PLUGIN and the names dlopen is given for it, in order.
struct NetPluginCandidate {
  std::string entry;
  std::vector<std::string> files;
};

// The libraries an NCCL_NET_PLUGIN value asks for (see the rules above):
// empty for "none"; one candidate per non-empty list entry otherwise.
// Pure (no file-system access), for tests and for the loader.
std::vector<NetPluginCandidate> netPluginCandidates(const std::string& value);

// What a v11 plugin's init receives (NCCL: the communicator's hash and its
// config's trafficClass); v10 plugins get trafficClass at connect.
struct NetPluginInitArgs {
  uint64_t commId = 0;
  int trafficClass = -1;  // NCCL_NET_TRAFFIC_CLASS_UNDEF
};

// Loads the plugin NCCL_NET_PLUGIN / NCCL_NET ask for. Returns ncclSuccess
// with the engine in *out, or ncclSuccess with *out null when no plugin is to
// be used (disabled, missing, unusable, or named differently from NCCL_NET);
// then *why (when given) says why, and a WARN (INFO where NCCL is quiet too:
// a missing default library, "none", a name mismatch) tells the user that
// the built-in Socket engine is used instead. Other codes only for Ferry's
// own failures (allocation).
//
// The engine keeps the library loaded until it is destroyed. Note for
// callers of connect(): plugins (NCCL's IB transport among them) keep their
// connection progress inside the handle buffer between calls, so every call
// for one connection must pass the same writable buffer.
[[nodiscard]] Status loadNetPlugin(const Params& params, std::unique_ptr<NetEngine>* out,
                                   std::string* why);
[[nodiscard]] Status loadNetPlugin(const Params& params, const NetPluginInitArgs& args,
                                   std::unique_ptr<NetEngine>* out, std::string* why);

// The ncclNetPlugin_vN version behind an engine loadNetPlugin returned; 0 for
// any other engine.
int netPluginVersion(const NetEngine& engine);
// The file the dynamic loader found that plugin in (for logs); empty for
// any other engine.
std::string netPluginPath(const NetEngine& engine);

}  // namespace ferry::net
