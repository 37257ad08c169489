// NCCL net plugins (net/plugin.h): NCCL_NET_PLUGIN's name rules; the test
// plugin (tests/net/test_net_plugin.cc) loaded as ncclNetPlugin_v11 and as
// ncclNetPlugin_v6 and driven through the NetEngine adapter between two
// threads with random data; its logger lines arriving in Ferry's log; and
// every reason to leave a plugin unused (disabled, missing, no known symbol,
// failing init, NCCL_NET naming another engine).
//
// Every wait is bounded (kWait); a plugin that stops making progress fails
// the test instead of hanging it.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/env_guard.h"
#include "common/log_capture.h"
#include "common/proc.h"
#include "common/random.h"
#include "core/log.h"
#include "core/params.h"
#include "net/plugin.h"

#ifndef FERRY_TEST_NET_PLUGIN_V11
#error "tests/net/net.cmake passes the test plugins' paths"
#endif

namespace ferry::net {
namespace {

using Clock = std::chrono::steady_clock;
using ferry::test::EnvGuard;
constexpr auto kWait = std::chrono::seconds(5);
constexpr const char* kV11 = FERRY_TEST_NET_PLUGIN_V11;
constexpr const char* kV6 = FERRY_TEST_NET_PLUGIN_V6;
constexpr unsigned char kPoison = 0xA5;
constexpr size_t kSlack = 13;  // receive buffers are this much larger than the message

// The plugin library opened by the test too, for its call counters. Holding
// it also keeps the counters alive between engines.
class PluginCounters {
 public:
  explicit PluginCounters(const char* path) : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ != nullptr) {
      fn_ = reinterpret_cast<long long (*)(const char*)>(dlsym(handle_, "ferryTestNetCounters"));
    }
  }
  ~PluginCounters() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  PluginCounters(const PluginCounters&) = delete;
  PluginCounters& operator=(const PluginCounters&) = delete;

  bool valid() const { return fn_ != nullptr; }
  long long operator()(const char* name) const { return fn_ != nullptr ? fn_(name) : -2; }

 private:
  void* handle_;
  long long (*fn_)(const char*) = nullptr;
};

Params pluginParams(const std::string& plugin, const char* net = nullptr) {
  std::vector<std::pair<std::string, std::string>> values{{"NCCL_NET_PLUGIN", plugin}};
  if (net != nullptr) values.emplace_back("NCCL_NET", net);
  return Params::fromValues(values);
}

std::unique_ptr<NetEngine> load(const Params& params, std::string* why = nullptr,
                                uint64_t commId = 0) {
  std::unique_ptr<NetEngine> engine;
  std::string reason;
  NetPluginInitArgs args;
  args.commId = commId;
  EXPECT_EQ(loadNetPlugin(params, args, &engine, &reason), ncclSuccess);
  if (why != nullptr) *why = reason;
  return engine;
}

void fillRandom(std::vector<unsigned char>* buf, test::Rng& rng) {
  size_t i = 0;
  for (; i + 8 <= buf->size(); i += 8) {
    uint64_t v = rng.next();
    memcpy(buf->data() + i, &v, 8);
  }
  for (; i < buf->size(); ++i) (*buf)[i] = static_cast<unsigned char>(rng.next());
}

bool expired(Clock::time_point deadline) {
  return Clock::now() > deadline;
}

// ---- one connection, many messages ----------------------------------------------

struct Layout {
  std::vector<size_t> sizes;
  std::vector<size_t> sendOffsets;  // into one registered send buffer
  std::vector<size_t> recvOffsets;  // into one registered receive buffer (size + kSlack each)
  size_t sendBytes = 0;
  size_t recvBytes = 0;
};

Layout makeLayout(const std::vector<size_t>& sizes) {
  Layout l;
  l.sizes = sizes;
  for (size_t s : sizes) {
    l.sendOffsets.push_back(l.sendBytes);
    l.recvOffsets.push_back(l.recvBytes);
    l.sendBytes += s;
    l.recvBytes += s + kSlack;
  }
  return l;
}

#define RETURN_IF_FAILED(expr, what)                                           \
  do {                                                                         \
    Status s_ = (expr);                                                        \
    if (s_ != ncclSuccess) return std::string(what) + ": " + statusString(s_); \
  } while (0)

// The sending peer: its own copy of the listen handle (as if it came over
// the network), every message posted as soon as the plugin takes it, the
// oldest tested until done. Returns "" or what went wrong.
std::string runSender(NetEngine* engine, const char* listenHandle, const Layout& layout,
                      std::vector<unsigned char>* data) {
  char handle[kNetHandleBytes];
  memcpy(handle, listenHandle, sizeof(handle));
  Clock::time_point deadline = Clock::now() + kWait;
  void* comm = nullptr;
  while (comm == nullptr) {
    RETURN_IF_FAILED(engine->connect(0, handle, &comm), "connect");
    if (expired(deadline)) return "connect did not complete";
  }
  void* mr = nullptr;
  RETURN_IF_FAILED(engine->regMr(comm, data->data(), data->size(), kPtrHost, &mr), "regMr");
  const size_t n = layout.sizes.size();
  std::vector<void*> requests(n, nullptr);
  size_t posted = 0, done = 0;
  while (done < n) {
    if (posted < n) {
      void* request = nullptr;
      RETURN_IF_FAILED(engine->isend(comm, data->data() + layout.sendOffsets[posted],
                                     layout.sizes[posted], 7, mr, &request),
                       "isend");
      if (request != nullptr) requests[posted++] = request;
    }
    if (done < posted) {
      int finished = 0;
      size_t size = 0;
      RETURN_IF_FAILED(engine->test(requests[done], &finished, &size), "test(send)");
      if (finished) {
        if (size != layout.sizes[done]) return "send reported a wrong size";
        ++done;
      }
    }
    if (expired(deadline)) return "sends did not complete";
  }
  RETURN_IF_FAILED(engine->deregMr(comm, mr), "deregMr(send)");
  RETURN_IF_FAILED(engine->closeSend(comm), "closeSend");
  return "";
}

// The receiving peer, on the calling thread; received sizes go to *got.
std::string runReceiver(NetEngine* engine, void* listenComm, const Layout& layout,
                        std::vector<unsigned char>* data, std::vector<size_t>* got) {
  Clock::time_point deadline = Clock::now() + kWait;
  void* comm = nullptr;
  while (comm == nullptr) {
    RETURN_IF_FAILED(engine->accept(listenComm, &comm), "accept");
    if (expired(deadline)) return "accept did not complete";
  }
  void* mr = nullptr;
  RETURN_IF_FAILED(engine->regMr(comm, data->data(), data->size(), kPtrHost, &mr), "regMr");
  const size_t n = layout.sizes.size();
  std::vector<void*> requests(n, nullptr);
  got->assign(n, SIZE_MAX);
  size_t posted = 0, done = 0;
  while (done < n) {
    if (posted < n) {
      void* buf = data->data() + layout.recvOffsets[posted];
      size_t capacity = layout.sizes[posted] + kSlack;
      int tag = 7;
      void* request = nullptr;
      RETURN_IF_FAILED(engine->irecv(comm, 1, &buf, &capacity, &tag, &mr, &request), "irecv");
      if (request != nullptr) requests[posted++] = request;
    }
    if (done < posted) {
      int finished = 0;
      RETURN_IF_FAILED(engine->test(requests[done], &finished, &(*got)[done]), "test(recv)");
      if (finished) ++done;
    }
    if (expired(deadline)) return "receives did not complete";
  }
  RETURN_IF_FAILED(engine->deregMr(comm, mr), "deregMr(recv)");
  RETURN_IF_FAILED(engine->closeRecv(comm), "closeRecv");
  return "";
}

// Every byte of every message arrived, with the size sent reported, and
// the slack behind each message is untouched.
void checkReceived(const Layout& layout, const std::vector<unsigned char>& sendData,
                   const std::vector<unsigned char>& recvData, const std::vector<size_t>& got) {
  for (size_t i = 0; i < layout.sizes.size(); ++i) {
    const size_t size = layout.sizes[i];
    ASSERT_EQ(got[i], size) << "message " << i;
    const unsigned char* want = sendData.data() + layout.sendOffsets[i];
    const unsigned char* have = recvData.data() + layout.recvOffsets[i];
    if (memcmp(have, want, size) != 0) {
      size_t b = 0;
      while (have[b] == want[b]) ++b;
      FAIL() << "message " << i << " (" << size << " B) differs first at byte " << b << ": got "
             << int(have[b]) << ", want " << int(want[b]);
    }
    for (size_t b = size; b < size + kSlack; ++b) {
      ASSERT_EQ(have[b], kPoison) << "message " << i << " wrote past its size at byte " << b;
    }
  }
}

struct Buffers {
  Layout layout;
  std::vector<unsigned char> sendData;
  std::vector<unsigned char> recvData;
};

Buffers makeBuffers(const std::vector<size_t>& sizes, uint64_t stream) {
  Buffers b;
  b.layout = makeLayout(sizes);
  test::Rng rng(test::testSeed(), stream);
  b.sendData.resize(b.layout.sendBytes);
  fillRandom(&b.sendData, rng);
  b.recvData.assign(b.layout.recvBytes, kPoison);
  return b;
}

// Moves `sizes` from `sender` to `receiver` (two engines, two threads) and
// checks the result; no descriptor may be left open afterwards.
void exchange(NetEngine* sender, NetEngine* receiver, const std::vector<size_t>& sizes,
              uint64_t stream) {
  Buffers b = makeBuffers(sizes, stream);
  const int fds0 = test::countOpenFds();
  char handle[kNetHandleBytes] = {};
  void* listenComm = nullptr;
  ASSERT_EQ(receiver->listen(0, handle, &listenComm), ncclSuccess);
  std::string sendError;
  std::thread peer([&] { sendError = runSender(sender, handle, b.layout, &b.sendData); });
  std::vector<size_t> got;
  std::string recvError = runReceiver(receiver, listenComm, b.layout, &b.recvData, &got);
  peer.join();
  EXPECT_EQ(receiver->closeListen(listenComm), ncclSuccess);
  ASSERT_EQ(sendError, "");
  ASSERT_EQ(recvError, "");
  checkReceived(b.layout, b.sendData, b.recvData, got);
  EXPECT_EQ(test::countOpenFds(), fds0);
}

// waitpid with a deadline; kills the child when it overstays. Returns the
// exit code, or -1 when it had to be killed or did not exit normally.
int waitChild(pid_t child) {
  Clock::time_point deadline = Clock::now() + kWait;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (expired(deadline)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ---- name rules -------------------------------------------------------------------

std::vector<std::string> filesOf(const std::string& value, size_t index = 0) {
  std::vector<NetPluginCandidate> c = netPluginCandidates(value);
  return index < c.size() ? c[index].files : std::vector<std::string>{};
}

TEST(NetPluginNames, DefaultNoneAndNames) {
  EXPECT_EQ(filesOf(""), std::vector<std::string>{"libnccl-net.so"});
  EXPECT_TRUE(netPluginCandidates("none").empty());
  EXPECT_TRUE(netPluginCandidates("NONE").empty());
  EXPECT_TRUE(netPluginCandidates("None").empty());
  EXPECT_EQ(filesOf("ofi"), (std::vector<std::string>{"ofi", "libnccl-net-ofi.so"}));
  EXPECT_EQ(filesOf("aws-ofi"), (std::vector<std::string>{"aws-ofi", "libnccl-net-aws-ofi.so"}));
}

TEST(NetPluginNames, PathsAndLibraryFiles) {
  EXPECT_EQ(filesOf("/opt/x/libnccl-net-ofi.so"),
            std::vector<std::string>{"/opt/x/libnccl-net-ofi.so"});
  EXPECT_EQ(filesOf("./plugin"), std::vector<std::string>{"./plugin"});
  EXPECT_EQ(filesOf("libnccl-net-ofi.so"), std::vector<std::string>{"libnccl-net-ofi.so"});
  // NCCL 2.28 exempts only "lib*.so"; other names also get the prefix form.
  EXPECT_EQ(filesOf("ofi.so"), (std::vector<std::string>{"ofi.so", "libnccl-net-ofi.so.so"}));
  EXPECT_EQ(filesOf("libofi"), (std::vector<std::string>{"libofi", "libnccl-net-libofi.so"}));
  EXPECT_EQ(filesOf("libx.so.1"),
            (std::vector<std::string>{"libx.so.1", "libnccl-net-libx.so.1.so"}));
}

TEST(NetPluginNames, CommaList) {
  std::vector<NetPluginCandidate> c = netPluginCandidates("ofi,/x/libnccl-net-y.so,,ib,");
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].entry, "ofi");
  EXPECT_EQ(c[1].files, std::vector<std::string>{"/x/libnccl-net-y.so"});
  EXPECT_EQ(c[2].files, (std::vector<std::string>{"ib", "libnccl-net-ib.so"}));
  EXPECT_TRUE(netPluginCandidates(",").empty());
}

// ---- loading and moving data --------------------------------------------------------

void checkProperties(NetEngine* engine, int version) {
  int count = 0;
  ASSERT_EQ(engine->devices(&count), ncclSuccess);
  EXPECT_EQ(count, 1);
  NetProperties p;
  ASSERT_EQ(engine->properties(0, &p), ncclSuccess);
  EXPECT_EQ(p.name, "ferrytest-lo");
  EXPECT_EQ(p.pciPath, "");
  EXPECT_EQ(p.guid, 0xFE77u);
  EXPECT_EQ(p.ptrSupport, kPtrHost);
  EXPECT_EQ(p.speedMbps, 10000);
  EXPECT_EQ(p.port, 1);
  EXPECT_FLOAT_EQ(p.latencyUs, 5.5f);
  EXPECT_EQ(p.maxComms, 1024);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_FALSE(p.regIsGlobal);
  EXPECT_FALSE(p.forceFlush);
  // v6 cannot say; the adapter fills in NCCL's assumption (1 GiB).
  EXPECT_EQ(p.maxP2pBytes, version >= 9 ? uint64_t{1} << 31 : uint64_t{1} << 30);
  NetProperties none;
  EXPECT_NE(engine->properties(1, &none), ncclSuccess);
}

const std::vector<size_t> kMixedSizes = {1,  0,        7,   4099, 65537, 4u << 20, (3u << 20) + 5,
                                         13, 1u << 20, 100, 255,  256};

void loadAndMove(const char* path, int version) {
  PluginCounters counters(path);
  ASSERT_TRUE(counters.valid()) << dlerror();
  const long long init0 = counters("init");
  const long long isend0 = counters("isend");
  const long long irecv0 = counters("irecv");
  const long long test0 = counters("test");
  const long long regMr0 = counters("regMr");
  const long long deregMr0 = counters("deregMr");
  const long long closes0 = counters("closeSend") + counters("closeRecv") + counters("closeListen");
  const long long finalize0 = counters("finalize");
  {
    std::string why;
    // Two engines, as two communicators of one process would have.
    std::unique_ptr<NetEngine> a = load(pluginParams(path), &why, 0x1234);
    ASSERT_NE(a, nullptr) << why;
    std::unique_ptr<NetEngine> b = load(pluginParams(path), &why, 0x5678);
    ASSERT_NE(b, nullptr) << why;
    EXPECT_STREQ(a->name(), "FerryTest");
    EXPECT_EQ(netPluginVersion(*a), version);
    // v11: one init per engine; v6: once per loaded library.
    EXPECT_EQ(counters("init") - init0, version >= 11 ? 2 : 1);
    checkProperties(a.get(), version);

    exchange(a.get(), b.get(), kMixedSizes, version);
    const size_t n = kMixedSizes.size();
    // 12 messages through 8 request slots: some posts were turned away.
    EXPECT_GE(counters("isend") - isend0, static_cast<long long>(n));
    EXPECT_GE(counters("irecv") - irecv0, static_cast<long long>(n));
    EXPECT_GE(counters("test") - test0, static_cast<long long>(2 * n));
    EXPECT_EQ(counters("regMr") - regMr0, 2);
    EXPECT_EQ(counters("deregMr") - deregMr0, 2);
    EXPECT_EQ(counters("closeSend") + counters("closeRecv") + counters("closeListen") - closes0, 3);
    EXPECT_GE(counters("connect"), 1);
    EXPECT_GE(counters("accept"), 1);
    EXPECT_EQ(counters("finalize") - finalize0, 0);
  }
  EXPECT_EQ(counters("finalize") - finalize0, version >= 11 ? 2 : 0);
}

TEST(NetPluginLoad, V11MovesDataBetweenThreads) {
  loadAndMove(kV11, 11);
}

TEST(NetPluginLoad, V6MovesDataBetweenThreads) {
  loadAndMove(kV6, 6);
}

TEST(NetPluginLoad, V11LargeMessage) {
  std::unique_ptr<NetEngine> a = load(pluginParams(kV11));
  std::unique_ptr<NetEngine> b = load(pluginParams(kV11));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  exchange(a.get(), b.get(), {(64u << 20) + 3}, 100);
}

TEST(NetPluginLoad, V11MovesDataBetweenProcesses) {
  std::unique_ptr<NetEngine> receiver = load(pluginParams(kV11));
  ASSERT_NE(receiver, nullptr);
  Buffers b = makeBuffers({1, 4099, 0, 1u << 20, 77}, 200);
  char handle[kNetHandleBytes] = {};
  void* listenComm = nullptr;
  ASSERT_EQ(receiver->listen(0, handle, &listenComm), ncclSuccess);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Another rank: its own engine, the handle as received, then exit.
    std::unique_ptr<NetEngine> sender;
    std::string why;
    int code = 3;
    if (loadNetPlugin(pluginParams(kV11), &sender, &why) == ncclSuccess && sender != nullptr) {
      code = runSender(sender.get(), handle, b.layout, &b.sendData).empty() ? 0 : 1;
    }
    _exit(code);
  }
  std::vector<size_t> got;
  std::string recvError = runReceiver(receiver.get(), listenComm, b.layout, &b.recvData, &got);
  EXPECT_EQ(waitChild(child), 0);
  EXPECT_EQ(receiver->closeListen(listenComm), ncclSuccess);
  ASSERT_EQ(recvError, "");
  checkReceived(b.layout, b.sendData, b.recvData, got);
}

TEST(NetPluginLoad, V6InitAgainAfterLastEngine) {
  PluginCounters counters(kV6);
  ASSERT_TRUE(counters.valid());
  const long long init0 = counters("init");
  { ASSERT_NE(load(pluginParams(kV6)), nullptr); }
  { ASSERT_NE(load(pluginParams(kV6)), nullptr); }
  EXPECT_EQ(counters("init") - init0, 2);
}

TEST(NetPluginLoad, V6SizeLimitsCheckedBeforeThePlugin) {
  std::unique_ptr<NetEngine> engine = load(pluginParams(kV6));
  ASSERT_NE(engine, nullptr);
  PluginCounters counters(kV6);
  const long long regMr0 = counters("regMr");
  const long long isend0 = counters("isend");
  const long long irecv0 = counters("irecv");
  char byte = 0;
  void* mr = nullptr;
  void* request = nullptr;
  EXPECT_EQ(engine->regMr(nullptr, &byte, size_t{1} << 31, kPtrHost, &mr), ncclInvalidArgument);
  EXPECT_EQ(engine->isend(nullptr, &byte, (size_t{1} << 30) + 1, 0, nullptr, &request),
            ncclInvalidArgument);
  void* buf = &byte;
  size_t size = (size_t{1} << 30) + 1;
  int tag = 0;
  EXPECT_EQ(engine->irecv(nullptr, 1, &buf, &size, &tag, &mr, &request), ncclInvalidArgument);
  EXPECT_EQ(counters("regMr"), regMr0);
  EXPECT_EQ(counters("isend"), isend0);
  EXPECT_EQ(counters("irecv"), irecv0);
  // The plugin itself checks what reaches it (maxRecvs 1).
  size_t sizes[2] = {1, 1};
  void* bufs[2] = {&byte, &byte};
  int tags[2] = {0, 0};
  void* mrs[2] = {nullptr, nullptr};
  EXPECT_NE(engine->irecv(nullptr, 2, bufs, sizes, tags, mrs, &request), ncclSuccess);
}

TEST(NetPluginLoad, EngineKeepsLibraryLoaded) {
  // Nothing else holds the library here: the engine alone keeps it mapped.
  ASSERT_EQ(dlopen(kV6, RTLD_NOW | RTLD_NOLOAD), nullptr) << "an earlier test leaked a handle";
  std::unique_ptr<NetEngine> engine = load(pluginParams(kV6));
  ASSERT_NE(engine, nullptr);
  void* probe = dlopen(kV6, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(probe, nullptr);
  if (probe != nullptr) dlclose(probe);
  engine.reset();
  EXPECT_EQ(dlopen(kV6, RTLD_NOW | RTLD_NOLOAD), nullptr);
}

TEST(NetPluginLoad, CommaListTakesFirstThatLoads) {
  std::string why;
  std::unique_ptr<NetEngine> engine =
      load(pluginParams(std::string("/nonexistent/libnccl-net-a.so,") + kV6), &why);
  ASSERT_NE(engine, nullptr) << why;
  EXPECT_EQ(netPluginVersion(*engine), 6);
}

// ---- reasons not to use a plugin ---------------------------------------------------------

TEST(NetPluginLoad, NoneDisables) {
  std::string why;
  EXPECT_EQ(load(pluginParams("none"), &why), nullptr);
  EXPECT_NE(why.find("none"), std::string::npos) << why;
}

TEST(NetPluginLoad, MissingLibraryByPath) {
  std::string why;
  EXPECT_EQ(load(pluginParams("/nonexistent/libnccl-net-missing.so"), &why), nullptr);
  EXPECT_NE(why.find("/nonexistent/libnccl-net-missing.so"), std::string::npos) << why;
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;
  // Named by the user, so worth a WARN that mentions the fallback.
  EXPECT_NE(lastWarning().find("Socket"), std::string::npos) << lastWarning();
}

TEST(NetPluginLoad, MissingLibraryByName) {
  std::string why;
  EXPECT_EQ(load(pluginParams("ferry-no-such-net"), &why), nullptr);
  EXPECT_NE(why.find("ferry-no-such-net"), std::string::npos) << why;
  EXPECT_NE(why.find("libnccl-net-ferry-no-such-net.so"), std::string::npos) << why;
}

TEST(NetPluginLoad, MissingDefaultLibraryIsQuiet) {
  void* present = dlopen(kDefaultNetPluginLib, RTLD_NOW | RTLD_LOCAL);
  if (present != nullptr) {
    dlclose(present);
    GTEST_SKIP() << "this machine has a libnccl-net.so";
  }
  const std::string warnBefore = lastWarning();
  std::string why;
  EXPECT_EQ(load(Params::fromValues({}), &why), nullptr);
  EXPECT_NE(why.find(kDefaultNetPluginLib), std::string::npos) << why;
  EXPECT_EQ(lastWarning(), warnBefore);
}

TEST(NetPluginLoad, LibraryWithoutPluginSymbol) {
  std::string why;
  EXPECT_EQ(load(pluginParams("libc.so.6"), &why), nullptr);
  EXPECT_NE(why.find("exports none of ncclNetPlugin_v11"), std::string::npos) << why;
  EXPECT_NE(lastWarning().find("exports none"), std::string::npos) << lastWarning();
}

TEST(NetPluginLoad, FailingInitLeavesPluginUnused) {
  PluginCounters v11(kV11);
  PluginCounters v6(kV6);
  const long long init11 = v11("init");
  const long long init6 = v6("init");
  const long long finalize11 = v11("finalize");
  {
    EnvGuard fail("FERRY_TEST_NET_FAIL_INIT", "1");
    std::string why;
    EXPECT_EQ(load(pluginParams(kV11), &why), nullptr);
    EXPECT_NE(why.find("init"), std::string::npos) << why;
    EXPECT_EQ(load(pluginParams(kV6), &why), nullptr);
    EXPECT_NE(why.find("init"), std::string::npos) << why;
  }
  EXPECT_EQ(v11("init") - init11, 1);
  EXPECT_EQ(v6("init") - init6, 1);
  EXPECT_EQ(v11("finalize"), finalize11);  // nothing to finalize after a failed init
  // A failed v6 init is not remembered as done: the next load tries again.
  EXPECT_NE(load(pluginParams(kV6)), nullptr);
  EXPECT_EQ(v6("init") - init6, 2);
}

TEST(NetPluginLoad, NetNameMustMatch) {
  PluginCounters counters(kV11);
  const long long init0 = counters("init");
  const std::string warnBefore = lastWarning();
  std::string why;
  EXPECT_EQ(load(pluginParams(kV11, "IB"), &why), nullptr);
  EXPECT_NE(why.find("NCCL_NET=IB"), std::string::npos) << why;
  EXPECT_EQ(load(pluginParams(kV11, "Socket"), &why), nullptr);
  EXPECT_EQ(counters("init"), init0);    // names are compared before init
  EXPECT_EQ(lastWarning(), warnBefore);  // INFO only, as NCCL
  // The comparison ignores case.
  std::unique_ptr<NetEngine> engine = load(pluginParams(kV11, "ferrytest"), &why);
  ASSERT_NE(engine, nullptr) << why;
  EXPECT_EQ(counters("init") - init0, 1);
}

// ---- the plugin's logger ----------------------------------------------------------------

TEST(NetPluginLoad, PluginLinesReachFerrysLog) {
  test::LogCapture capture("INFO", "NET");
  ASSERT_TRUE(capture.ok());
  { EXPECT_NE(load(pluginParams(kV11), nullptr, 0xABCDEF), nullptr); }
  {
    EnvGuard fail("FERRY_TEST_NET_FAIL_INIT", "1");
    EXPECT_EQ(load(pluginParams(kV11)), nullptr);
  }
  std::string log = capture.text();
  const std::string pid = std::to_string(getpid());
  // INFO: the plugin's printf arguments formatted, its subsystem honoured.
  EXPECT_NE(log.find("NCCL INFO ferrytest: init v11 in pid " + pid + ", commId 0xabcdef"),
            std::string::npos)
      << log;
  // WARN: printed with the plugin's own source location.
  EXPECT_NE(log.find("test_net_plugin.cc"), std::string::npos) << log;
  EXPECT_NE(log.find("ferrytest: init refused (FERRY_TEST_NET_FAIL_INIT=1) in pid " + pid),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace ferry::net
