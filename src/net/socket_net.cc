// The socket engine's NetEngine face: devices, knobs, and the mapping of the
// interface's opaque comm/request pointers onto the objects of
// socket_net_internal.h.
#include "net/socket_net.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_map>
#include <utility>

#include "core/log.h"
#include "net/socket_net_internal.h"

namespace ferry::net {

namespace {

constexpr int kDefaultThreads = 4;
constexpr int kDefaultSocksPerThread = 2;
constexpr int kDefaultSpeedMbps = 10000;
// The automatic helper settings (resolveSocketNetTuning): shared helpers,
// a quarter of the cores within these bounds, spinning this long where
// there are 16 cores or more. On 2x H200 as two emulated hosts (32 cores),
// 8 shared helpers spinning 500 us took a 4 MiB alltoall from 400-520 to
// 230-310 us and sendrecv from 510-700 to 380-530 (session 44).
constexpr int kMinAutoShared = 2;
constexpr int kMaxAutoShared = 8;
constexpr int64_t kAutoSpinUs = 500;

// Link speed in Mb/s from sysfs; virtual links (loopback, bridges) have
// none or report -1.
int readSpeedMbps(const std::string& ifname) {
  std::ifstream in("/sys/class/net/" + ifname + "/speed");
  long speed = 0;
  if (in >> speed && speed > 0 && speed < (1L << 30)) return static_cast<int>(speed);
  return kDefaultSpeedMbps;
}

std::string readPciPath(const std::string& ifname) {
  std::string link = "/sys/class/net/" + ifname + "/device";
  std::unique_ptr<char, decltype(&free)> real(realpath(link.c_str(), nullptr), free);
  return real ? std::string(real.get()) : std::string();
}

struct Device {
  boot::InterfaceAddress iface;
  NetProperties props;
};

class SocketNet final : public NetEngine {
 public:
  SocketNet(std::vector<Device> devices, SocketNetLayout layout, const SocketNetTuning& tuning)
      : devices_(std::move(devices)), layout_(layout), tuning_(tuning) {
    if (tuning.sharedHelpers > 0) {
      pool_ = std::make_unique<sock::WorkerPool>(tuning.sharedHelpers, tuning.helperSpinUs * 1000);
    }
  }
  // Members go in reverse order: pending connects, then comms (each stops
  // its own threads or leaves the shared ones first), then the shared
  // helpers, then listeners.
  ~SocketNet() override = default;

  const char* name() const override { return "Socket"; }

  Status devices(int* count) override {
    *count = static_cast<int>(devices_.size());
    return ncclSuccess;
  }

  Status properties(int dev, NetProperties* out) override {
    FERRY_CHECK(checkDev(dev));
    *out = devices_[static_cast<size_t>(dev)].props;
    return ncclSuccess;
  }

  Status listen(int dev, void* handle, void** listenComm) override;
  Status connect(int dev, void* handle, void** sendComm) override;
  Status accept(void* listenComm, void** recvComm) override;
  Status regMr(void* comm, void* data, size_t size, int type, void** mhandle) override;
  Status deregMr(void* comm, void* mhandle) override;

  Status isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override {
    sock::Comm* c = nullptr;
    FERRY_CHECK(findComm(sendComm, true, "isend", &c));
    sock::Request* r = nullptr;
    FERRY_CHECK(c->post(data, size, &r));
    *request = r;
    return ncclSuccess;
  }

  Status irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
               void** request) override {
    sock::Comm* c = nullptr;
    FERRY_CHECK(findComm(recvComm, false, "irecv", &c));
    if (n != 1) {
      FERRY_FAIL(ncclInvalidArgument, "net/socket: irecv of %d buffers (maxRecvs is 1)", n);
    }
    sock::Request* r = nullptr;
    FERRY_CHECK(c->post(data[0], sizes[0], &r));
    *request = r;
    return ncclSuccess;
  }

  Status iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request) override {
    // Host memory only: a received byte is visible as soon as test() says so.
    *request = nullptr;
    return ncclSuccess;
  }

  Status test(void* request, int* done, size_t* sizes) override {
    auto* r = static_cast<sock::Request*>(request);
    if (r == nullptr || r->comm == nullptr || done == nullptr) {
      FERRY_FAIL(ncclInvalidArgument, "net/socket: test of a null or never-posted request");
    }
    return r->comm->test(r, done, sizes);
  }

  Status closeSend(void* sendComm) override { return closeComm(sendComm, true); }
  Status closeRecv(void* recvComm) override { return closeComm(recvComm, false); }

  Status closeListen(void* listenComm) override {
    if (listens_.erase(listenComm) == 0) {
      FERRY_FAIL(ncclInvalidArgument, "net/socket: closeListen of an unknown listen comm");
    }
    return ncclSuccess;
  }

 private:
  Status checkDev(int dev) const {
    if (dev < 0 || dev >= static_cast<int>(devices_.size())) {
      FERRY_FAIL(ncclInvalidArgument, "net/socket: device %d out of range (%zu devices)", dev,
                 devices_.size());
    }
    return ncclSuccess;
  }

  Status findComm(void* handle, bool send, const char* what, sock::Comm** out) {
    auto it = comms_.find(handle);
    if (it == comms_.end() || it->second->isSend() != send) {
      FERRY_FAIL(ncclInvalidArgument, "net/socket: %s on something that is not a %s comm", what,
                 send ? "send" : "receive");
    }
    *out = it->second.get();
    return ncclSuccess;
  }

  Status closeComm(void* handle, bool send) {
    sock::Comm* c = nullptr;
    FERRY_CHECK(findComm(handle, send, send ? "closeSend" : "closeRecv", &c));
    // Destroying the comm stops and joins its helper threads before its
    // sockets and request ring go.
    comms_.erase(handle);
    return ncclSuccess;
  }

  std::vector<Device> devices_;
  SocketNetLayout layout_;
  SocketNetTuning tuning_;
  std::unordered_map<void*, std::unique_ptr<sock::ListenComm>> listens_;
  // Before comms_: outlives every comm that uses it.
  std::unique_ptr<sock::WorkerPool> pool_;
  std::unordered_map<void*, std::unique_ptr<sock::Comm>> comms_;
  // connect() in progress, by device and handle bytes: the handle is const,
  // so the state of a half-done connect lives here until the caller's next
  // call with the same handle.
  std::map<std::string, std::unique_ptr<sock::Connector>> connecting_;
};

Status SocketNet::listen(int dev, void* handle, void** listenComm) {
  FERRY_CHECK(checkDev(dev));
  boot::SocketAddress addr = devices_[static_cast<size_t>(dev)].iface.addr;
  addr.setPort(0);
  boot::Socket listener;
  FERRY_CHECK(boot::Socket::listen(addr, false, &listener));
  boot::SocketAddress bound = listener.localAddress();
  if (!bound.valid()) FERRY_FAIL(ncclSystemError, "net/socket: getsockname on a listener failed");
  sock::encodeHandle(bound, handle);
  auto lc = std::make_unique<sock::ListenComm>(std::move(listener), tuning_);
  *listenComm = lc.get();
  listens_.emplace(lc.get(), std::move(lc));
  FERRY_INFO(kLogNet, "net/socket: listening on %s (device %d)", bound.toString().c_str(), dev);
  return ncclSuccess;
}

Status SocketNet::connect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  FERRY_CHECK(checkDev(dev));
  boot::SocketAddress addr;
  FERRY_CHECK(sock::decodeHandle(handle, &addr));
  std::string key = std::to_string(dev) + ":";
  key.append(static_cast<const char*>(handle), sock::kHandleUsedBytes);
  auto it = connecting_.find(key);
  if (it == connecting_.end()) {
    it = connecting_.emplace(key, std::make_unique<sock::Connector>(addr, layout_, tuning_)).first;
  }
  std::unique_ptr<sock::Comm> comm;
  Status s = it->second->progress(&comm);
  if (s != ncclSuccess || comm) connecting_.erase(it);
  FERRY_CHECK(s);
  if (comm) {
    comm->usePool(pool_.get());
    *sendComm = comm.get();
    comms_.emplace(comm.get(), std::move(comm));
  }
  return ncclSuccess;
}

Status SocketNet::accept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  auto it = listens_.find(listenComm);
  if (it == listens_.end()) {
    FERRY_FAIL(ncclInvalidArgument, "net/socket: accept on an unknown listen comm");
  }
  std::unique_ptr<sock::Comm> comm;
  FERRY_CHECK(it->second->accept(&comm));
  if (comm) {
    comm->usePool(pool_.get());
    *recvComm = comm.get();
    comms_.emplace(comm.get(), std::move(comm));
  }
  return ncclSuccess;
}

Status SocketNet::regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  auto it = comms_.find(comm);
  if (it == comms_.end()) FERRY_FAIL(ncclInvalidArgument, "net/socket: regMr on an unknown comm");
  if (type != kPtrHost) {
    FERRY_FAIL(ncclInvalidArgument,
               "net/socket: regMr of %s memory; the socket engine moves host memory only",
               type == kPtrCuda ? "CUDA" : "non-host");
  }
  return it->second->registerMemory(data, size, mhandle);
}

Status SocketNet::deregMr(void* comm, void* mhandle) {
  auto it = comms_.find(comm);
  if (it == comms_.end()) FERRY_FAIL(ncclInvalidArgument, "net/socket: deregMr on an unknown comm");
  return it->second->deregisterMemory(mhandle);
}

int resolveOne(const Params& params, ParamId id, const char* name, int max, int def, bool* bad) {
  int64_t v = params.getInt(id);
  if (v == 0) return def;
  if (v < 1 || v > max) {
    FERRY_WARN("net/socket: %s=%lld is outside 1..%d; using the defaults (%d threads x %d sockets)",
               name, static_cast<long long>(v), max, kDefaultThreads, kDefaultSocksPerThread);
    *bad = true;
    return def;
  }
  return static_cast<int>(v);
}

// CPUs this process may run on (its affinity mask; 1 when unknown).
int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

int onlineCores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 && n < (1L << 20) ? static_cast<int>(n) : 1;
}

}  // namespace

int helperCpuBudget(int maskCpus, int onlineCpus, int processesOnHost) {
  const int mask = std::max(1, maskCpus);
  const int procs = std::max(1, processesOnHost);
  // 64-bit: a large host times many processes must not overflow.
  if (static_cast<int64_t>(mask) * procs <= std::max(1, onlineCpus)) return mask;
  return std::max(1, mask / procs);
}

SocketNetTuning resolveSocketNetTuning(const Params& params, SocketNetTuning given, int cores) {
  SocketNetTuning t = given;
  if (t.helperSpinUs < 0) {
    t.helperSpinUs = params.getInt(ParamId::NetHelperSpinUs);
    if (t.helperSpinUs < -1) {
      FERRY_WARN("FERRY_NET_HELPER_SPIN_US=%lld is negative; using the default (-1)",
                 static_cast<long long>(t.helperSpinUs));
      t.helperSpinUs = -1;
    }
    // A spinning helper holds a core: only where cores are plentiful, so
    // that loopback TCP and the rest of the process keep theirs (trap 78).
    if (t.helperSpinUs == -1) t.helperSpinUs = cores >= 16 ? kAutoSpinUs : 0;
  }
  if (t.sharedHelpers < 0) {
    const int64_t n = params.getInt(ParamId::NetSharedHelpers);
    if (n < -1 || n > sock::kMaxDataSocks) {
      FERRY_WARN("FERRY_NET_SHARED_HELPERS=%lld is outside -1..%d; using the default (-1)",
                 static_cast<long long>(n), sock::kMaxDataSocks);
    }
    t.sharedHelpers = n >= 0 && n <= sock::kMaxDataSocks
                          ? static_cast<int>(n)
                          : std::min(kMaxAutoShared, std::max(kMinAutoShared, cores / 4));
  }
  return t;
}

SocketNetLayout resolveSocketNetLayout(const Params& params) {
  SocketNetLayout l;
  bool bad = false;
  l.nThreads = resolveOne(params, ParamId::SocketNthreads, "NCCL_SOCKET_NTHREADS",
                          sock::kMaxThreads, kDefaultThreads, &bad);
  l.nSocksPerThread = resolveOne(params, ParamId::NsocksPerthread, "NCCL_NSOCKS_PERTHREAD",
                                 sock::kMaxSocksPerThread, kDefaultSocksPerThread, &bad);
  if (bad) return SocketNetLayout{kDefaultThreads, kDefaultSocksPerThread};
  if (l.nThreads * l.nSocksPerThread > sock::kMaxDataSocks) {
    FERRY_WARN(
        "net/socket: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %d x %d exceeds %d sockets; "
        "using the defaults (%d x %d)",
        l.nThreads, l.nSocksPerThread, sock::kMaxDataSocks, kDefaultThreads,
        kDefaultSocksPerThread);
    return SocketNetLayout{kDefaultThreads, kDefaultSocksPerThread};
  }
  return l;
}

std::vector<boot::InterfaceAddress> selectSocketNetDevices(
    const std::vector<boot::InterfaceAddress>& all, const std::string& spec, int family) {
  std::vector<boot::InterfaceAddress> out;
  auto familyOk = [family](const boot::InterfaceAddress& ia) {
    return family == AF_UNSPEC || ia.addr.family() == family;
  };
  auto known = [&out](const std::string& name) {
    for (const auto& d : out) {
      if (d.name == name) return true;
    }
    return false;
  };
  for (const auto& ia : all) {
    if (familyOk(ia) && boot::matchInterfaceName(spec, ia.name) && !known(ia.name)) {
      out.push_back(ia);
    }
  }
  if (out.empty() && spec.empty()) {
    for (const auto& ia : all) {
      if (familyOk(ia) && ia.loopback) {
        out.push_back(ia);
        break;
      }
    }
  }
  return out;
}

Status createSocketNet(const Params& params, std::unique_ptr<NetEngine>* out) {
  return createSocketNet(params, SocketNetTuning(), out);
}

Status createSocketNet(const Params& params, const SocketNetTuning& tuning,
                       std::unique_ptr<NetEngine>* out) {
  const std::string& spec = params.getString(ParamId::SocketIfname);
  int family = AF_UNSPEC;
  FERRY_CHECK(boot::parseFamily(params.getString(ParamId::SocketFamily), &family));
  std::vector<boot::InterfaceAddress> all;
  FERRY_CHECK(boot::listInterfaces(&all));
  std::vector<boot::InterfaceAddress> chosen = selectSocketNetDevices(all, spec, family);
  if (chosen.empty()) {
    std::string seen;
    for (const auto& ia : all) seen += " " + ia.name + "=" + ia.addr.hostString();
    FERRY_FAIL(ncclSystemError,
               "net/socket: no interface matches NCCL_SOCKET_IFNAME='%s' NCCL_SOCKET_FAMILY='%s'; "
               "available:%s",
               spec.c_str(), params.getString(ParamId::SocketFamily).c_str(),
               seen.empty() ? " (none)" : seen.c_str());
  }
  SocketNetLayout layout = resolveSocketNetLayout(params);
  std::vector<Device> devices;
  std::string list;
  for (size_t i = 0; i < chosen.size(); ++i) {
    Device d;
    d.iface = chosen[i];
    d.props.name = chosen[i].name;
    d.props.pciPath = readPciPath(chosen[i].name);
    d.props.guid = i;
    d.props.ptrSupport = kPtrHost;
    d.props.speedMbps = readSpeedMbps(chosen[i].name);
    d.props.latencyUs = 0;
    d.props.maxComms = 65536;
    d.props.maxRecvs = 1;
    list += " [" + std::to_string(i) + "]" + d.iface.name + ":" + d.iface.addr.hostString();
    devices.push_back(std::move(d));
  }
  const int mask = usableCores();
  const int budget = helperCpuBudget(mask, onlineCores(), tuning.processesOnHost);
  const SocketNetTuning tuned = resolveSocketNetTuning(params, tuning, budget);
  char helpers[160];
  if (tuned.sharedHelpers > 0) {
    snprintf(helpers, sizeof(helpers),
             "%d shared helper threads (for %d CPUs: %d in this process's mask, %d process(es) on "
             "this host)",
             tuned.sharedHelpers, budget, mask, std::max(1, tuning.processesOnHost));
  } else {
    snprintf(helpers, sizeof(helpers), "a helper thread per group");
  }
  FERRY_INFO(kLogNet | kLogInit,
             "NET/Socket: %d groups x %d sockets per connection, %s, helpers spin %lld us; "
             "devices:%s",
             layout.nThreads, layout.nSocksPerThread, helpers,
             static_cast<long long>(tuned.helperSpinUs), list.c_str());
  *out = std::make_unique<SocketNet>(std::move(devices), layout, tuned);
  return ncclSuccess;
}

SocketNetLayout socketNetCommLayout(const void* comm) {
  return static_cast<const sock::Comm*>(comm)->layout();
}

uint64_t socketNetLateWakeups() {
  return sock::lateWakeups();
}

}  // namespace ferry::net
