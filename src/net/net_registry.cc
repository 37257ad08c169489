#include "net/net_registry.h"

#include <strings.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/log.h"
#include "net/plugin.h"
#include "net/socket_net.h"

namespace ferry {
namespace {

constexpr const char* kSocketName = "Socket";

// Every call under one mutex. The engine is shared by every communicator
// of the process, and their init threads (ncclCommInitAll, non-blocking
// init, one thread per GPU) call it concurrently, while an engine's own
// state (the socket engine's comm tables, a plugin's) is not thread-safe.
// The calls never block (connect/accept/isend/irecv/test return at once;
// only close joins a comm's helper threads), so holding the lock is short.
class SerializedNetEngine final : public net::NetEngine {
 public:
  explicit SerializedNetEngine(std::unique_ptr<net::NetEngine> inner) : inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }
  Status devices(int* count) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->devices(count);
  }
  Status properties(int dev, net::NetProperties* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->properties(dev, out);
  }
  Status listen(int dev, void* handle, void** listenComm) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->listen(dev, handle, listenComm);
  }
  Status connect(int dev, void* handle, void** sendComm) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->connect(dev, handle, sendComm);
  }
  Status accept(void* listenComm, void** recvComm) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->accept(listenComm, recvComm);
  }
  Status regMr(void* comm, void* data, size_t size, int type, void** mhandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->regMr(comm, data, size, type, mhandle);
  }
  Status deregMr(void* comm, void* mhandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->deregMr(comm, mhandle);
  }
  Status isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->isend(sendComm, data, size, tag, mhandle, request);
  }
  Status irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
               void** request) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->irecv(recvComm, n, data, sizes, tags, mhandles, request);
  }
  Status iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->iflush(recvComm, n, data, sizes, mhandles, request);
  }
  Status test(void* request, int* done, size_t* sizes) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->test(request, done, sizes);
  }
  Status closeSend(void* sendComm) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->closeSend(sendComm);
  }
  Status closeRecv(void* recvComm) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->closeRecv(recvComm);
  }
  Status closeListen(void* listenComm) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_->closeListen(listenComm);
  }

 private:
  std::mutex mu_;
  std::unique_ptr<net::NetEngine> inner_;
};

struct Registry {
  std::mutex mu;
  std::unique_ptr<net::NetEngine> engine;  // guarded by mu; set once
  // processNetTransportName's answer; points at a string that is never freed.
  std::atomic<const char*> transportName{"NET"};
  // processNetEngineIsBuiltIn's answer: the engine is the built-in sockets.
  std::atomic<bool> builtIn{false};
};

Registry& registry() {
  // Allocated once and never destroyed: communicators the program never
  // destroyed (or destroys from its own exit-time destructors, as Python
  // frameworks do) still hold comms of the engine at exit; destroying it
  // from a static destructor would join socket helper threads or dlclose a
  // plugin underneath them. The operating system reclaims its sockets.
  static Registry* const r = new Registry();
  return *r;
}

// The built-in engine, or the plugin NCCL_NET / NCCL_NET_PLUGIN ask for.
// `where` says where it came from, for the log line.
Status createEngine(const Params& params, int processesOnHost, std::unique_ptr<net::NetEngine>* out,
                    std::string* where) {
  const std::string& wanted = params.getString(ParamId::Net);
  if (strcasecmp(wanted.c_str(), kSocketName) != 0) {
    // Process-wide engine: no single communicator's id or traffic class.
    std::string why;
    FERRY_CHECK(net::loadNetPlugin(params, net::NetPluginInitArgs{}, out, &why));
    if (*out) {
      *where = "net plugin " + net::netPluginPath(**out) + " (ncclNetPlugin_v" +
               std::to_string(net::netPluginVersion(**out)) + ")";
      return ncclSuccess;
    }
    if (!wanted.empty()) {
      FERRY_FAIL(ncclInvalidArgument,
                 "NCCL_NET=%s names no network engine; available: %s (built-in); net plugins "
                 "(NCCL_NET_PLUGIN=%s): %s",
                 wanted.c_str(), kSocketName, params.getString(ParamId::NetPlugin).c_str(),
                 why.empty() ? "none" : why.c_str());
    }
  }
  net::SocketNetTuning tuning;
  tuning.processesOnHost = processesOnHost;
  FERRY_CHECK(net::createSocketNet(params, tuning, out));
  *where = "built-in sockets";
  return ncclSuccess;
}

std::string describeDevices(net::NetEngine& engine, int count) {
  std::string list;
  for (int d = 0; d < count; ++d) {
    net::NetProperties props;
    list += " [" + std::to_string(d) + "]";
    list += ok(engine.properties(d, &props)) ? props.name : std::string("?");
  }
  return list;
}

}  // namespace

Status processNetEngine(const Params& params, int processesOnHost, net::NetEngine** out) {
  *out = nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.engine) {
    const std::string& wanted = params.getString(ParamId::Net);
    if (!wanted.empty() && strcasecmp(wanted.c_str(), r.engine->name()) != 0) {
      FERRY_WARN(
          "NCCL_NET=%s, but this process's network engine is already %s (chosen by its "
          "first communicator); using %s",
          wanted.c_str(), r.engine->name(), r.engine->name());
    }
    *out = r.engine.get();
    return ncclSuccess;
  }
  std::unique_ptr<net::NetEngine> engine;
  std::string where;
  FERRY_CHECK(createEngine(params, processesOnHost, &engine, &where));
  int count = 0;
  FERRY_CHECK(engine->devices(&count));
  FERRY_INFO(kLogNet | kLogInit, "NET/%s : using %s, %d device%s:%s", engine->name(), where.c_str(),
             count, count == 1 ? "" : "s", describeDevices(*engine, count).c_str());
  // Release: pairs with processNetEngineIsBuiltIn's acquire (a reader that
  // got the engine from this registry sees its kind).
  r.builtIn.store(net::netPluginVersion(*engine) == 0, std::memory_order_release);
  r.engine = std::make_unique<SerializedNetEngine>(std::move(engine));
  // Never freed, as the engine (registry() says why).
  const auto* name = new std::string("NET/" + std::string(r.engine->name()));
  r.transportName.store(name->c_str(), std::memory_order_release);
  *out = r.engine.get();
  return ncclSuccess;
}

bool processNetEngineIsBuiltIn() {
  return registry().builtIn.load(std::memory_order_acquire);
}

const char* processNetTransportName() {
  return registry().transportName.load(std::memory_order_acquire);
}

}  // namespace ferry
