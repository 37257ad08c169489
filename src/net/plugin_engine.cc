// NetEngine adapters over NCCL net plugin tables, one template for the six
// versions: the differences between versions (argument lists, int vs size_t
// sizes, property fields) are settled at compile time with `if constexpr`,
// so each call is a single indirect call into the plugin plus, for old
// versions, a range check.
#include "net/plugin_engine.h"

#include <dlfcn.h>

#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/log.h"

namespace ferry::net {

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

void pluginLogger(abi::ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                  const char* fmt, ...) {
  // Called from C code: nothing may escape.
  try {
    LogLevel ours;
    uint32_t subsys = static_cast<uint32_t>(flags);
    if (subsys == 0) subsys = kLogNet;
    switch (level) {
      case abi::NCCL_LOG_VERSION:
        ours = LogLevel::Version;
        break;
      case abi::NCCL_LOG_WARN:
      case abi::NCCL_LOG_ABORT:
        ours = LogLevel::Warn;
        subsys = kLogAll;
        break;
      case abi::NCCL_LOG_INFO:
        ours = LogLevel::Info;
        break;
      case abi::NCCL_LOG_TRACE:
        ours = LogLevel::Trace;
        break;
      default:
        return;
    }
    // WARN lines are recorded for ncclGetLastError even when not printed.
    if (ours != LogLevel::Warn && !logEnabled(ours, subsys)) return;
    char body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt != nullptr ? fmt : "", ap);
    va_end(ap);
    // Many plugins end their lines with '\n'; Ferry's logger adds its own.
    size_t len = strlen(body);
    while (len > 0 && body[len - 1] == '\n') body[--len] = '\0';
    logMessage(ours, subsys, file != nullptr ? file : "net-plugin", line, "%s", body);
  } catch (...) {
  }
}

namespace {

// Ferry gives plugins no profiler; v10+ plugins are handed this stand-in so
// that a plugin which calls the hook without checking for null still works.
ncclResult_t noProfiler(void** eHandle, int, void*, int64_t, void*) {
  if (eHandle != nullptr) *eHandle = nullptr;
  return ncclSuccess;
}

// Buffers one irecv may group; NCCL never posts more than 8 per call, and
// the per-call scratch arrays below are sized by this.
constexpr int kMaxGroupedRecvs = 64;

// Users of each v6..v10 table in the process (keyed by table address):
// those plugins keep process-wide state and expect one init, which the
// first engine of a loaded library performs. Leaked on purpose: engines may
// be destroyed during static destruction.
struct LegacyInitRegistry {
  std::mutex mu;
  std::unordered_map<const void*, int> users;
};
LegacyInitRegistry& legacyInits() {
  static auto* registry = new LegacyInitRegistry;
  return *registry;
}

template <int V>
struct Tables;
template <>
struct Tables<6> {
  using Net = abi::ncclNet_v6_t;
  using Props = abi::ncclNetProperties_v6_t;
};
template <>
struct Tables<7> {
  using Net = abi::ncclNet_v7_t;
  using Props = abi::ncclNetProperties_v7_t;
};
template <>
struct Tables<8> {
  using Net = abi::ncclNet_v8_t;
  using Props = abi::ncclNetProperties_v8_t;
};
template <>
struct Tables<9> {
  using Net = abi::ncclNet_v9_t;
  using Props = abi::ncclNetProperties_v9_t;
};
template <>
struct Tables<10> {
  using Net = abi::ncclNet_v10_t;
  using Props = abi::ncclNetProperties_v10_t;
};
template <>
struct Tables<11> {
  using Net = abi::ncclNet_v11_t;
  using Props = abi::ncclNetProperties_v11_t;
};

// Fills `out` from a version-V property struct; fields V lacks take the
// values NCCL 2.28 assumes for such plugins.
template <int V>
void convertProperties(const typename Tables<V>::Props& p, NetProperties* out) {
  out->name = p.name != nullptr ? p.name : "";
  out->pciPath = p.pciPath != nullptr ? p.pciPath : "";
  out->guid = p.guid;
  out->ptrSupport = p.ptrSupport;
  out->speedMbps = p.speed;
  out->port = p.port;
  out->latencyUs = p.latency;
  out->maxComms = p.maxComms;
  out->maxRecvs = p.maxRecvs;
  out->regIsGlobal = false;
  out->forceFlush = false;
  out->maxP2pBytes = abi::kLegacyMaxP2pBytes;
  out->maxCollBytes = abi::kLegacyMaxCollBytes;
  if constexpr (V >= 8) out->regIsGlobal = p.regIsGlobal != 0;
  if constexpr (V >= 9) {
    out->forceFlush = p.forceFlush != 0;
    out->maxP2pBytes = p.maxP2pBytes;
    out->maxCollBytes = p.maxCollBytes;
  }
}

template <int V>
class PluginEngine final : public PluginNetEngine {
  using Net = typename Tables<V>::Net;
  using Props = typename Tables<V>::Props;

 public:
  PluginEngine(const Net* net, SharedLibrary lib, const NetPluginInitArgs& args)
      : lib_(std::move(lib)), net_(net) {
    config_.trafficClass = args.trafficClass;
    commId_ = args.commId;
  }
  ~PluginEngine() override { stop(); }

  int version() const override { return V; }
  const char* name() const override { return net_->name != nullptr ? net_->name : "(unnamed)"; }

  Status start() override;
  Status offloadType(int dev, int* type) override;

  Status devices(int* count) override { return net_->devices(count); }
  Status properties(int dev, NetProperties* out) override {
    Props p{};
    Status s = net_->getProperties(dev, &p);
    if (ok(s)) convertProperties<V>(p, out);
    return s;
  }

  Status listen(int dev, void* handle, void** listenComm) override {
    *listenComm = nullptr;
    if constexpr (V >= 11) {
      return net_->listen(ctx_, dev, handle, listenComm);
    } else {
      return net_->listen(dev, handle, listenComm);
    }
  }
  Status connect(int dev, void* handle, void** sendComm) override;
  Status accept(void* listenComm, void** recvComm) override {
    *recvComm = nullptr;
    if constexpr (V == 6) {
      return net_->accept(listenComm, recvComm);
    } else {
      abi::ncclNetDeviceHandle_v7_t* offload = nullptr;  // null: no offload asked for
      return net_->accept(listenComm, recvComm, &offload);
    }
  }

  Status regMr(void* comm, void* data, size_t size, int type, void** mhandle) override {
    if constexpr (V < 8) {
      if (size > static_cast<size_t>(INT_MAX)) {
        FERRY_FAIL(ncclInvalidArgument,
                   "NET/Plugin: %s (v%d) cannot register %zu bytes at once (its sizes are int)",
                   name(), V, size);
      }
      return net_->regMr(comm, data, static_cast<int>(size), type, mhandle);
    } else {
      return net_->regMr(comm, data, size, type, mhandle);
    }
  }
  Status deregMr(void* comm, void* mhandle) override { return net_->deregMr(comm, mhandle); }

  Status isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override;
  Status irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
               void** request) override;
  Status iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request) override {
    *request = nullptr;
    if (net_->iflush == nullptr) return ncclSuccess;
    return net_->iflush(recvComm, n, data, sizes, mhandles, request);
  }
  Status test(void* request, int* done, size_t* sizes) override;

  Status closeSend(void* sendComm) override { return net_->closeSend(sendComm); }
  Status closeRecv(void* recvComm) override { return net_->closeRecv(recvComm); }
  Status closeListen(void* listenComm) override { return net_->closeListen(listenComm); }

 private:
  Status callInit();
  Status checkTable() const;
  void stop();

  SharedLibrary lib_;  // first member, so the library is closed last
  const Net* net_;
  uint64_t commId_ = 0;
  abi::ncclNetCommConfig_v10_t config_{};  // v10: given to connect; v11: to init
  void* ctx_ = nullptr;                    // v11: the plugin's per-engine context
  bool started_ = false;
  // Buffer counts of outstanding grouped receives (n > 1), so test() copies
  // exactly as many sizes as the caller's array holds; absent means 1.
  std::unordered_map<void*, int> groupedRecvs_;
};

template <int V>
Status PluginEngine<V>::checkTable() const {
  struct Required {
    const char* what;
    bool present;
  };
  const Required required[] = {
      {"init", net_->init != nullptr},
      {"devices", net_->devices != nullptr},
      {"getProperties", net_->getProperties != nullptr},
      {"listen", net_->listen != nullptr},
      {"connect", net_->connect != nullptr},
      {"accept", net_->accept != nullptr},
      {"regMr", net_->regMr != nullptr},
      {"deregMr", net_->deregMr != nullptr},
      {"isend", net_->isend != nullptr},
      {"irecv", net_->irecv != nullptr},
      {"test", net_->test != nullptr},
      {"closeSend", net_->closeSend != nullptr},
      {"closeRecv", net_->closeRecv != nullptr},
      {"closeListen", net_->closeListen != nullptr},
  };
  for (const Required& r : required) {
    if (!r.present) {
      FERRY_FAIL(ncclInternalError, "NET/Plugin: %s (v%d) has no %s function", name(), V, r.what);
    }
  }
  return ncclSuccess;
}

template <int V>
Status PluginEngine<V>::callInit() {
  if constexpr (V <= 9) {
    return net_->init(pluginLogger);
  } else if constexpr (V == 10) {
    return net_->init(pluginLogger, noProfiler);
  } else {
    return net_->init(&ctx_, commId_, &config_, pluginLogger, noProfiler);
  }
}

template <int V>
Status PluginEngine<V>::start() {
  FERRY_CHECK(checkTable());
  if constexpr (V >= 11) {
    FERRY_CHECK(callInit());
  } else {
    LegacyInitRegistry& registry = legacyInits();
    std::lock_guard<std::mutex> lock(registry.mu);
    int& users = registry.users[net_];
    if (users == 0) {
      Status s = callInit();
      if (!ok(s)) {
        registry.users.erase(net_);
        return s;
      }
    }
    ++users;
  }
  started_ = true;
  return ncclSuccess;
}

template <int V>
void PluginEngine<V>::stop() {
  if (!started_) return;
  started_ = false;
  if constexpr (V >= 11) {
    if (net_->finalize != nullptr) {
      Status s = net_->finalize(ctx_);
      if (!ok(s)) FERRY_WARN("NET/Plugin: %s finalize failed: %s", name(), statusString(s));
    }
    ctx_ = nullptr;
  } else {
    LegacyInitRegistry& registry = legacyInits();
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.users.find(net_);
    if (it != registry.users.end() && --it->second == 0) registry.users.erase(it);
  }
}

template <int V>
Status PluginEngine<V>::offloadType(int dev, int* type) {
  *type = abi::NCCL_NET_DEVICE_HOST;
  if constexpr (V >= 7) {
    Props p{};
    FERRY_CHECK(net_->getProperties(dev, &p));
    *type = p.netDeviceType;
  }
  return ncclSuccess;
}

template <int V>
Status PluginEngine<V>::connect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  // Plugins keep connection progress in the handle (see plugin.h), so they
  // get the caller's buffer itself, not a copy.
  void* h = handle;
  [[maybe_unused]] abi::ncclNetDeviceHandle_v7_t* offload = nullptr;  // null: no offload wanted
  if constexpr (V == 6) {
    return net_->connect(dev, h, sendComm);
  } else if constexpr (V <= 9) {
    return net_->connect(dev, h, sendComm, &offload);
  } else if constexpr (V == 10) {
    return net_->connect(dev, &config_, h, sendComm, &offload);
  } else {
    return net_->connect(ctx_, dev, h, sendComm, &offload);
  }
}

template <int V>
Status PluginEngine<V>::isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                              void** request) {
  *request = nullptr;
  if constexpr (V < 9) {
    if (size > abi::kLegacyMaxP2pBytes) {
      FERRY_FAIL(ncclInvalidArgument,
                 "NET/Plugin: %s (v%d) cannot send %zu bytes at once (max %zu)", name(), V, size,
                 abi::kLegacyMaxP2pBytes);
    }
    return net_->isend(sendComm, data, static_cast<int>(size), tag, mhandle, request);
  } else if constexpr (V == 9) {
    return net_->isend(sendComm, data, size, tag, mhandle, request);
  } else {
    return net_->isend(sendComm, data, size, tag, mhandle, nullptr, request);
  }
}

template <int V>
Status PluginEngine<V>::irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                              void** mhandles, void** request) {
  if (n < 1 || n > kMaxGroupedRecvs) {
    FERRY_FAIL(ncclInvalidArgument, "NET/Plugin: irecv of %d buffers (1..%d)", n, kMaxGroupedRecvs);
  }
  // A null *request tells v9+ plugins that no completion hint is given.
  *request = nullptr;
  Status s;
  if constexpr (V < 9) {
    int intSizes[kMaxGroupedRecvs];
    for (int i = 0; i < n; ++i) {
      if (sizes[i] > abi::kLegacyMaxP2pBytes) {
        FERRY_FAIL(ncclInvalidArgument,
                   "NET/Plugin: %s (v%d) cannot receive %zu bytes at once (max %zu)", name(), V,
                   sizes[i], abi::kLegacyMaxP2pBytes);
      }
      intSizes[i] = static_cast<int>(sizes[i]);
    }
    s = net_->irecv(recvComm, n, data, intSizes, tags, mhandles, request);
  } else if constexpr (V == 9) {
    s = net_->irecv(recvComm, n, data, sizes, tags, mhandles, request);
  } else {
    void* noProfile[kMaxGroupedRecvs] = {};  // an array, as NCCL passes one
    s = net_->irecv(recvComm, n, data, sizes, tags, mhandles, noProfile, request);
  }
  if (ok(s) && *request != nullptr && n > 1) groupedRecvs_[*request] = n;
  return s;
}

template <int V>
Status PluginEngine<V>::test(void* request, int* done, size_t* sizes) {
  int n = 1;
  auto grouped = groupedRecvs_.end();
  if (!groupedRecvs_.empty()) {
    grouped = groupedRecvs_.find(request);
    if (grouped != groupedRecvs_.end()) n = grouped->second;
  }
  int intSizes[kMaxGroupedRecvs] = {};
  *done = 0;
  Status s = net_->test(request, done, sizes != nullptr ? intSizes : nullptr);
  // Once done (or failed) the plugin has released the request.
  if ((!ok(s) || *done) && grouped != groupedRecvs_.end()) groupedRecvs_.erase(grouped);
  if (ok(s) && *done && sizes != nullptr) {
    for (int i = 0; i < n; ++i) sizes[i] = intSizes[i] > 0 ? static_cast<size_t>(intSizes[i]) : 0;
  }
  return s;
}

}  // namespace

std::unique_ptr<PluginNetEngine> makePluginNetEngine(int version, const void* table,
                                                     SharedLibrary lib,
                                                     const NetPluginInitArgs& args) {
  switch (version) {
    case 6:
      return std::make_unique<PluginEngine<6>>(static_cast<const abi::ncclNet_v6_t*>(table),
                                               std::move(lib), args);
    case 7:
      return std::make_unique<PluginEngine<7>>(static_cast<const abi::ncclNet_v7_t*>(table),
                                               std::move(lib), args);
    case 8:
      return std::make_unique<PluginEngine<8>>(static_cast<const abi::ncclNet_v8_t*>(table),
                                               std::move(lib), args);
    case 9:
      return std::make_unique<PluginEngine<9>>(static_cast<const abi::ncclNet_v9_t*>(table),
                                               std::move(lib), args);
    case 10:
      return std::make_unique<PluginEngine<10>>(static_cast<const abi::ncclNet_v10_t*>(table),
                                                std::move(lib), args);
    case 11:
      return std::make_unique<PluginEngine<11>>(static_cast<const abi::ncclNet_v11_t*>(table),
                                                std::move(lib), args);
    default:
      return nullptr;
  }
}

}  // namespace ferry::net
