// A small NCCL net plugin for Ferry's tests, built twice (tests/net/net.cmake):
//   FERRY_TEST_NET_VERSION=11 -> libnccl-net-ferrytest.so,  exports ncclNetPlugin_v11 only;
//   FERRY_TEST_NET_VERSION=6  -> libnccl-net-ferrytest6.so, exports ncclNetPlugin_v6 only.
// Both are named "FerryTest" and move bytes over loopback TCP (127.0.0.1),
// host memory only, one buffer per irecv, so they work between threads and
// between processes. Everything is non-blocking: connect/accept return a
// null comm until the connection is up (connect keeps its progress in the
// caller's handle, as NCCL's IB transport does), and isend/irecv only queue
// a request, which test() moves forward; a comm holds 8 requests at most,
// after which isend/irecv answer "not now" (null request).
//
// Wire format per message: 16-byte header (magic, size), then the bytes.
// A receive buffer may be larger than the message; test() reports the size
// sent. Every entry point counts its calls; the extra C function
// ferryTestNetCounters("isend") returns a count (-1 for an unknown name).
// FERRY_TEST_NET_FAIL_INIT=1 in the environment makes init fail.
// FERRY_TEST_NET_SEND_GAP_US=G makes a slow network: test() reports a send
// done no sooner than G us after the comm's previous one.
// FERRY_TEST_NET_DEVICES=N (1..8, default 1) makes it report N devices
// ("NICs", all on loopback); ferryTestNetCounters("listen@d") and
// ("connect@d") count the calls on device d; ("isendBytes") the bytes of
// the isends it accepted. FERRY_TEST_NET_PTR_CUDA=1 makes it take
// NCCL_PTR_CUDA registrations too (device memory is plain memory on Ferry's
// host runtime); ("regMrCuda"), ("isendCuda") and ("irecvCuda") count the
// registrations of that type and the requests made on such memory.
// Bytes received into such memory stay scrambled until an iflush on their
// comm (a model of a NIC's writes that the GPU may not see before a
// flush): a receiver that reads them unflushed gets garbage. The iflush
// returns a request that test() completes at once; ("iflushCuda") counts
// them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <utility>
#include <vector>

#include "net/plugin_abi.h"

#if !defined(FERRY_TEST_NET_VERSION) || \
    (FERRY_TEST_NET_VERSION != 6 && FERRY_TEST_NET_VERSION != 11)
#error "define FERRY_TEST_NET_VERSION as 6 or 11"
#endif

namespace {

using namespace ferry::net::abi;

// ---- call counters ------------------------------------------------------------

enum Fn : int {
  kInit,
  kDevices,
  kGetProperties,
  kListen,
  kConnect,
  kAccept,
  kRegMr,
  kDeregMr,
  kIsend,
  kIrecv,
  kIflush,
  kTest,
  kCloseSend,
  kCloseRecv,
  kCloseListen,
  kFinalize,
  kFnCount
};
constexpr const char* kFnNames[kFnCount] = {"init",      "devices",   "getProperties", "listen",
                                            "connect",   "accept",    "regMr",         "deregMr",
                                            "isend",     "irecv",     "iflush",        "test",
                                            "closeSend", "closeRecv", "closeListen",   "finalize"};
std::atomic<long long> gCalls[kFnCount];
std::atomic<long long> gIsendBytes{0};
constexpr int kMaxDevs = 8;
std::atomic<long long> gDevListens[kMaxDevs];
std::atomic<long long> gDevConnects[kMaxDevs];

int deviceCount() {
  const char* s = getenv("FERRY_TEST_NET_DEVICES");
  const int n = s != nullptr ? atoi(s) : 1;
  return n >= 1 && n <= kMaxDevs ? n : 1;
}

void count(Fn fn) {
  gCalls[fn].fetch_add(1, std::memory_order_relaxed);
}

std::atomic<ncclDebugLogger_t> gLogger{nullptr};

#define PLUGIN_LOG(level, ...)                                                     \
  do {                                                                             \
    ncclDebugLogger_t log_ = gLogger.load();                                       \
    if (log_ != nullptr) log_((level), NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// ---- objects handed to the host ---------------------------------------------------

constexpr uint32_t kHandleMagic = 0xFE77A001;
constexpr uint32_t kHelloMagic = 0xFE77A002;
constexpr uint32_t kCommMagic = 0xFE77A003;
constexpr uint32_t kListenMagic = 0xFE77A004;
constexpr uint32_t kMrMagic = 0xFE77A005;
constexpr uint32_t kContextMagic = 0xFE77A006;
constexpr uint64_t kMessageMagic = 0xFE77A0070000FE77ull;
constexpr int kRequestsPerComm = NCCL_NET_MAX_REQUESTS_V6;

// The listen handle. Its last fields are the connecting side's progress,
// written into that side's copy of the handle between connect() calls.
struct Handle {
  uint32_t magic;
  uint16_t port;   // network byte order
  uint16_t stage;  // connector: 0 nothing yet, 1 TCP connecting, 2 sending hello
  int32_t fd;      // connector: the socket while stage > 0
  uint32_t helloSent;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);

struct Context {  // v11 only
  uint32_t magic;
  uint64_t commId;
  int trafficClass;
};

struct MemHandle {
  uint32_t magic;
  const char* base;
  size_t size;
  int type;  // NCCL_PTR_HOST or NCCL_PTR_CUDA
};

std::atomic<long long> gRegMrCuda{0}, gIsendCuda{0}, gIrecvCuda{0}, gIflushCuda{0};

// The one request an iflush returns (a flush of device memory): test()
// completes it at once.
constexpr uint32_t kFlushMagic = 0x464c5348;  // "FLSH"
struct FlushRequest {
  uint32_t magic = kFlushMagic;
};
FlushRequest gFlushRequest;

bool takesCuda() {
  const char* v = getenv("FERRY_TEST_NET_PTR_CUDA");
  return v != nullptr && strcmp(v, "1") == 0;
}

bool onCuda(void* mhandle) {
  return static_cast<MemHandle*>(mhandle)->type == NCCL_PTR_CUDA;
}

struct Comm;

struct Request {
  Comm* comm = nullptr;
  bool inUse = false;
  bool isSend = false;
  bool finished = false;
  bool failed = false;
  char* data = nullptr;
  size_t capacity = 0;  // send: the message size; recv: the buffer size
  size_t bodySize = 0;  // bytes of the message (recv: from the header)
  uint64_t header[2] = {};
  size_t headerDone = 0;
  size_t bodyDone = 0;
  bool cuda = false;  // a receive into NCCL_PTR_CUDA memory
};

struct Comm {
  uint32_t magic = kCommMagic;
  int fd = -1;
  bool isSend = false;
  Request requests[kRequestsPerComm];
  std::deque<Request*> queue;                            // in posting order; only the head moves
  std::vector<std::pair<char*, size_t>> unflushed;       // scrambled until iflush
  std::chrono::steady_clock::time_point lastSendDone{};  // FERRY_TEST_NET_SEND_GAP_US
};

void scramble(char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(p[i] ^ 0x5C);
}

struct ListenComm {
  uint32_t magic = kListenMagic;
  int fd = -1;
  int pendingFd = -1;  // accepted, hello not complete yet
  uint32_t hello = 0;
  size_t helloGot = 0;
};

// FERRY_TEST_NET_SEND_GAP_US, read once (0: no pacing).
std::chrono::microseconds sendGap() {
  static const std::chrono::microseconds gap = [] {
    const char* v = getenv("FERRY_TEST_NET_SEND_GAP_US");
    return std::chrono::microseconds(v != nullptr ? atol(v) : 0);
  }();
  return gap;
}

bool failInitRequested() {
  const char* v = getenv("FERRY_TEST_NET_FAIL_INIT");
  return v != nullptr && strcmp(v, "1") == 0;
}

void closeFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// One non-blocking send or recv step: 1 moved some bytes, 0 would block,
// -1 failed (peer gone, reset, or any other error).
int ioStep(int fd, bool sending, char* buf, size_t len, size_t* done) {
  for (;;) {
    ssize_t n = sending ? send(fd, buf + *done, len - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, buf + *done, len - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      return 1;
    }
    if (n == 0 && !sending) return -1;  // orderly close in mid-stream
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return -1;
  }
}

bool markFailed(Request* r) {
  r->failed = true;
  return true;
}

// Moves request `r` as far as the socket allows: true when it finished or
// failed, false when it would block.
bool advance(Request* r) {
  int fd = r->comm->fd;
  char* header = reinterpret_cast<char*>(r->header);
  while (r->headerDone < sizeof(r->header)) {
    int step = ioStep(fd, r->isSend, header, sizeof(r->header), &r->headerDone);
    if (step < 0) return markFailed(r);
    if (step == 0) return false;
  }
  if (!r->isSend && r->bodySize == 0 && r->bodyDone == 0) {
    if (r->header[0] != kMessageMagic || r->header[1] > r->capacity) {
      PLUGIN_LOG(NCCL_LOG_WARN, "ferrytest: bad message header (magic %llx, %llu bytes into %zu)",
                 static_cast<unsigned long long>(r->header[0]),
                 static_cast<unsigned long long>(r->header[1]), r->capacity);
      return markFailed(r);
    }
    r->bodySize = r->header[1];
  }
  while (r->bodyDone < r->bodySize) {
    int step = ioStep(fd, r->isSend, r->data, r->bodySize, &r->bodyDone);
    if (step < 0) return markFailed(r);
    if (step == 0) return false;
  }
  r->finished = true;
  return true;
}

void progress(Comm* comm) {
  while (!comm->queue.empty()) {
    Request* head = comm->queue.front();
    if (!advance(head)) return;
    comm->queue.pop_front();
    if (head->cuda && !head->failed) {
      scramble(head->data, head->bodySize);
      comm->unflushed.emplace_back(head->data, head->bodySize);
    }
    if (head->failed) {
      // The byte stream is out of step: everything behind fails too.
      for (Request* r : comm->queue) r->failed = true;
      comm->queue.clear();
    }
  }
}

Request* freeRequest(Comm* comm) {
  for (Request& r : comm->requests) {
    if (!r.inUse) {
      r = Request{};
      r.comm = comm;
      r.inUse = true;
      return &r;
    }
  }
  return nullptr;
}

bool covers(void* mhandle, const void* data, size_t size) {
  auto* mr = static_cast<MemHandle*>(mhandle);
  if (mr == nullptr || mr->magic != kMrMagic) return false;
  const char* p = static_cast<const char*>(data);
  return p >= mr->base && size <= mr->size &&
         p - mr->base <= static_cast<ptrdiff_t>(mr->size - size);
}

// ---- the interface, in its newest shape (size_t sizes) ------------------------

ncclResult_t initCommon(ncclDebugLogger_t logger, uint64_t commId) {
  count(kInit);
  gLogger.store(logger);
  if (failInitRequested()) {
    PLUGIN_LOG(NCCL_LOG_WARN, "ferrytest: init refused (FERRY_TEST_NET_FAIL_INIT=%d) in pid %d", 1,
               static_cast<int>(getpid()));
    return ncclSystemError;
  }
  PLUGIN_LOG(NCCL_LOG_INFO, "ferrytest: init v%d in pid %d, commId 0x%llx", FERRY_TEST_NET_VERSION,
             static_cast<int>(getpid()), static_cast<unsigned long long>(commId));
  return ncclSuccess;
}

ncclResult_t devices(int* ndev) {
  count(kDevices);
  *ndev = deviceCount();
  return ncclSuccess;
}

template <class Props>
ncclResult_t fillCommonProperties(int dev, Props* props) {
  count(kGetProperties);
  if (dev < 0 || dev >= deviceCount()) return ncclInvalidArgument;
  memset(props, 0, sizeof(*props));
  props->name = const_cast<char*>("ferrytest-lo");
  props->pciPath = nullptr;
  props->guid = 0xFE77;
  props->ptrSupport = NCCL_PTR_HOST | (takesCuda() ? NCCL_PTR_CUDA : 0);
  props->speed = 10000;
  props->port = 1;
  props->latency = 5.5f;
  props->maxComms = 1024;
  props->maxRecvs = 1;
  return ncclSuccess;
}

ncclResult_t listenCommon(int dev, void* handle, void** listenComm) {
  count(kListen);
  *listenComm = nullptr;
  if (dev < 0 || dev >= deviceCount()) return ncclInvalidArgument;
  gDevListens[dev].fetch_add(1, std::memory_order_relaxed);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  auto* h = static_cast<Handle*>(handle);
  h->magic = kHandleMagic;
  h->port = addr.sin_port;
  auto* lc = new (std::nothrow) ListenComm;
  if (lc == nullptr) {
    close(fd);
    return ncclSystemError;
  }
  lc->fd = fd;
  *listenComm = lc;
  return ncclSuccess;
}

Comm* newComm(int fd, bool isSend) {
  auto* comm = new (std::nothrow) Comm;
  if (comm == nullptr) return nullptr;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  comm->fd = fd;
  comm->isSend = isSend;
  return comm;
}

// Stage 0 starts a non-blocking TCP connect, stage 1 waits for it, stage 2
// sends the hello; each call goes as far as it can without waiting.
ncclResult_t connectStep(Handle* h, void** sendComm) {
  if (h->stage == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ncclSystemError;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = h->port;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
        errno != EINPROGRESS) {
      close(fd);
      return ncclSystemError;
    }
    h->fd = fd;
    h->stage = 1;
  }
  if (h->stage == 1) {
    pollfd p{h->fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) return ncclSuccess;
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      return ncclSystemError;
    }
    h->stage = 2;
    h->helloSent = 0;
  }
  uint32_t hello = kHelloMagic;
  size_t sent = h->helloSent;
  int step = ioStep(h->fd, true, reinterpret_cast<char*>(&hello), sizeof(hello), &sent);
  h->helloSent = static_cast<uint32_t>(sent);
  if (step < 0) return ncclSystemError;
  if (sent < sizeof(hello)) return ncclSuccess;
  Comm* comm = newComm(h->fd, true);
  if (comm == nullptr) return ncclSystemError;
  h->stage = 0;  // the handle may be used for another connection
  h->fd = -1;
  *sendComm = comm;
  return ncclSuccess;
}

ncclResult_t connectCommon(int dev, void* handle, void** sendComm) {
  count(kConnect);
  *sendComm = nullptr;
  auto* h = static_cast<Handle*>(handle);
  if (dev < 0 || dev >= deviceCount() || h == nullptr || h->magic != kHandleMagic) {
    return ncclInvalidArgument;
  }
  ncclResult_t result = connectStep(h, sendComm);
  if (result == ncclSuccess && *sendComm != nullptr) {
    gDevConnects[dev].fetch_add(1, std::memory_order_relaxed);  // connections made, not tries
  }
  if (result != ncclSuccess && h->stage != 0) {
    int fd = h->fd;
    closeFd(&fd);
    h->stage = 0;
    h->fd = -1;
  }
  return result;
}

ncclResult_t acceptCommon(void* listenComm, void** recvComm) {
  count(kAccept);
  *recvComm = nullptr;
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr || lc->magic != kListenMagic) return ncclInvalidArgument;
  if (lc->pendingFd < 0) {
    int fd = accept4(lc->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? ncclSuccess
                                                                         : ncclSystemError;
    }
    lc->pendingFd = fd;
    lc->helloGot = 0;
  }
  int step = ioStep(lc->pendingFd, false, reinterpret_cast<char*>(&lc->hello), sizeof(lc->hello),
                    &lc->helloGot);
  if (step == 0 && lc->helloGot < sizeof(lc->hello)) return ncclSuccess;
  if (step < 0 || lc->hello != kHelloMagic) {
    // A stranger (or a peer that left): drop it, keep listening.
    closeFd(&lc->pendingFd);
    return ncclSuccess;
  }
  if (lc->helloGot < sizeof(lc->hello)) return ncclSuccess;
  Comm* comm = newComm(lc->pendingFd, false);
  if (comm == nullptr) return ncclSystemError;
  lc->pendingFd = -1;
  *recvComm = comm;
  return ncclSuccess;
}

ncclResult_t regMrCommon(void* comm, void* data, size_t size, int type, void** mhandle) {
  count(kRegMr);
  *mhandle = nullptr;
  auto* c = static_cast<Comm*>(comm);
  const bool typeOk = type == NCCL_PTR_HOST || (type == NCCL_PTR_CUDA && takesCuda());
  if (c == nullptr || c->magic != kCommMagic || !typeOk) return ncclInvalidArgument;
  auto* mr = new (std::nothrow) MemHandle{kMrMagic, static_cast<const char*>(data), size, type};
  if (mr == nullptr) return ncclSystemError;
  if (type == NCCL_PTR_CUDA) gRegMrCuda.fetch_add(1, std::memory_order_relaxed);
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  count(kDeregMr);
  auto* mr = static_cast<MemHandle*>(mhandle);
  if (mr == nullptr || mr->magic != kMrMagic) return ncclInvalidArgument;
  mr->magic = 0;
  delete mr;
  return ncclSuccess;
}

ncclResult_t post(Comm* comm, bool isSend, void* data, size_t size, void** request) {
  Request* r = freeRequest(comm);
  if (r == nullptr) return ncclSuccess;  // all slots busy: "not now"
  r->isSend = isSend;
  r->data = static_cast<char*>(data);
  r->capacity = size;
  if (isSend) {
    r->bodySize = size;
    r->header[0] = kMessageMagic;
    r->header[1] = size;
  }
  comm->queue.push_back(r);
  *request = r;
  return ncclSuccess;
}

ncclResult_t isendCommon(void* sendComm, void* data, size_t size, void* mhandle, void** request) {
  count(kIsend);
  *request = nullptr;
  auto* comm = static_cast<Comm*>(sendComm);
  if (comm == nullptr || comm->magic != kCommMagic || !comm->isSend) return ncclInvalidArgument;
  if (!covers(mhandle, data, size)) {
    PLUGIN_LOG(NCCL_LOG_WARN, "ferrytest: isend of %zu bytes outside its registration", size);
    return ncclInvalidArgument;
  }
  ncclResult_t r = post(comm, true, data, size, request);
  if (r == ncclSuccess && *request != nullptr) {
    gIsendBytes.fetch_add(static_cast<long long>(size), std::memory_order_relaxed);
    if (onCuda(mhandle)) gIsendCuda.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

ncclResult_t irecvCommon(void* recvComm, int n, void** data, const size_t* sizes, void** mhandles,
                         void** request) {
  count(kIrecv);
  *request = nullptr;
  auto* comm = static_cast<Comm*>(recvComm);
  if (comm == nullptr || comm->magic != kCommMagic || comm->isSend || n != 1) {
    return ncclInvalidArgument;
  }
  if (!covers(mhandles[0], data[0], sizes[0])) {
    PLUGIN_LOG(NCCL_LOG_WARN, "ferrytest: irecv of %zu bytes outside its registration", sizes[0]);
    return ncclInvalidArgument;
  }
  ncclResult_t r = post(comm, false, data[0], sizes[0], request);
  if (r == ncclSuccess && *request != nullptr && onCuda(mhandles[0])) {
    gIrecvCuda.fetch_add(1, std::memory_order_relaxed);
    static_cast<Request*>(*request)->cuda = true;
  }
  return r;
}

ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                    void** request) {
  count(kIflush);
  *request = nullptr;  // host memory: nothing to flush
  auto* comm = static_cast<Comm*>(recvComm);
  if (comm == nullptr || comm->magic != kCommMagic || comm->isSend) return ncclInvalidArgument;
  for (auto& [p, len] : comm->unflushed) scramble(p, len);
  comm->unflushed.clear();
  if (n != 1 || !covers(mhandles[0], data[0], static_cast<size_t>(sizes[0]))) {
    PLUGIN_LOG(NCCL_LOG_WARN, "ferrytest: iflush outside its registration");
    return ncclInvalidArgument;
  }
  if (onCuda(mhandles[0])) {
    gIflushCuda.fetch_add(1, std::memory_order_relaxed);
    *request = &gFlushRequest;
  }
  return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes) {
  count(kTest);
  *done = 0;
  if (request == &gFlushRequest) {
    *done = 1;
    if (sizes != nullptr) sizes[0] = 0;
    return ncclSuccess;
  }
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || !r->inUse) return ncclInvalidArgument;
  progress(r->comm);
  if (r->failed) {
    r->inUse = false;
    PLUGIN_LOG(NCCL_LOG_WARN, "ferrytest: %s of %zu bytes failed (connection lost or bad header)",
               r->isSend ? "send" : "receive", r->capacity);
    return ncclSystemError;
  }
  if (!r->finished) return ncclSuccess;
  if (r->isSend && sendGap().count() > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now < r->comm->lastSendDone + sendGap()) return ncclSuccess;  // paced: not yet
    r->comm->lastSendDone = now;
  }
  *done = 1;
  if (sizes != nullptr) sizes[0] = static_cast<int>(r->bodySize);
  r->inUse = false;
  return ncclSuccess;
}

ncclResult_t closeComm(void* comm, Fn fn) {
  count(fn);
  auto* c = static_cast<Comm*>(comm);
  if (c == nullptr || c->magic != kCommMagic) return ncclInvalidArgument;
  closeFd(&c->fd);
  c->magic = 0;
  delete c;
  return ncclSuccess;
}
ncclResult_t closeSend(void* comm) {
  return closeComm(comm, kCloseSend);
}
ncclResult_t closeRecv(void* comm) {
  return closeComm(comm, kCloseRecv);
}

ncclResult_t closeListen(void* listenComm) {
  count(kCloseListen);
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr || lc->magic != kListenMagic) return ncclInvalidArgument;
  closeFd(&lc->pendingFd);
  closeFd(&lc->fd);
  lc->magic = 0;
  delete lc;
  return ncclSuccess;
}

// ---- version 11 shims -------------------------------------------------------------
#if FERRY_TEST_NET_VERSION == 11

bool validContext(void* ctx) {
  return ctx != nullptr && static_cast<Context*>(ctx)->magic == kContextMagic;
}

ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                     ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  *ctx = nullptr;
  ncclResult_t result = initCommon(logger, commId);
  if (result != ncclSuccess) return result;
  int trafficClass = config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  *ctx = new (std::nothrow) Context{kContextMagic, commId, trafficClass};
  return *ctx != nullptr ? ncclSuccess : ncclSystemError;
}

ncclResult_t finalizeV11(void* ctx) {
  count(kFinalize);
  if (!validContext(ctx)) return ncclInvalidArgument;
  auto* c = static_cast<Context*>(ctx);
  c->magic = 0;
  delete c;
  return ncclSuccess;
}

ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  ncclResult_t result = fillCommonProperties(dev, props);
  if (result != ncclSuccess) return result;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = size_t{1} << 31;
  props->maxCollBytes = size_t{1} << 31;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t listenV11(void* ctx, int dev, void* handle, void** listenComm) {
  if (!validContext(ctx)) return ncclInvalidArgument;
  return listenCommon(dev, handle, listenComm);
}

ncclResult_t connectV11(void* ctx, int dev, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v11_t** offload) {
  if (!validContext(ctx) || (offload != nullptr && *offload != nullptr)) {
    return ncclInvalidArgument;  // offload was never advertised
  }
  return connectCommon(dev, handle, sendComm);
}

ncclResult_t acceptV11(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** offload) {
  if (offload != nullptr && *offload != nullptr) return ncclInvalidArgument;
  return acceptCommon(listenComm, recvComm);
}

ncclResult_t isendV11(void* sendComm, void* data, size_t size, int, void* mhandle, void*,
                      void** request) {
  return isendCommon(sendComm, data, size, mhandle, request);
}

ncclResult_t irecvV11(void* recvComm, int n, void** data, size_t* sizes, int*, void** mhandles,
                      void**, void** request) {
  return irecvCommon(recvComm, n, data, sizes, mhandles, request);
}

#endif  // FERRY_TEST_NET_VERSION == 11

// ---- version 6 shims (int sizes, no context) ----------------------------------------
#if FERRY_TEST_NET_VERSION == 6

ncclResult_t initV6(ncclDebugLogger_t logger) {
  return initCommon(logger, 0);
}

ncclResult_t getPropertiesV6(int dev, ncclNetProperties_v6_t* props) {
  return fillCommonProperties(dev, props);
}

ncclResult_t regMrV6(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) return ncclInvalidArgument;
  return regMrCommon(comm, data, static_cast<size_t>(size), type, mhandle);
}

ncclResult_t isendV6(void* sendComm, void* data, int size, int, void* mhandle, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return isendCommon(sendComm, data, static_cast<size_t>(size), mhandle, request);
}

ncclResult_t irecvV6(void* recvComm, int n, void** data, int* sizes, int*, void** mhandles,
                     void** request) {
  if (n != 1 || sizes[0] < 0) return ncclInvalidArgument;
  size_t size = static_cast<size_t>(sizes[0]);
  return irecvCommon(recvComm, n, data, &size, mhandles, request);
}
#endif  // FERRY_TEST_NET_VERSION == 6

}  // namespace

// The library's only exported symbols (it is built with hidden visibility).
#define FERRY_TEST_EXPORT __attribute__((visibility("default")))

extern "C" FERRY_TEST_EXPORT long long ferryTestNetCounters(const char* fn) {
  if (fn == nullptr) return -1;
  if (strcmp(fn, "isendBytes") == 0) return gIsendBytes.load();
  if (strcmp(fn, "regMrCuda") == 0) return gRegMrCuda.load();
  if (strcmp(fn, "isendCuda") == 0) return gIsendCuda.load();
  if (strcmp(fn, "irecvCuda") == 0) return gIrecvCuda.load();
  if (strcmp(fn, "iflushCuda") == 0) return gIflushCuda.load();
  for (int i = 0; i < kFnCount; ++i) {
    if (strcmp(fn, kFnNames[i]) == 0) return gCalls[i].load();
  }
  // "listen@d" / "connect@d": per device.
  const char* at = strchr(fn, '@');
  if (at == nullptr || at[1] < '0' || at[1] >= '0' + kMaxDevs || at[2] != '\0') return -1;
  const int dev = at[1] - '0';
  const size_t len = static_cast<size_t>(at - fn);
  if (len == 6 && strncmp(fn, "listen", len) == 0) return gDevListens[dev].load();
  if (len == 7 && strncmp(fn, "connect", len) == 0) return gDevConnects[dev].load();
  return -1;
}

extern "C" {
#if FERRY_TEST_NET_VERSION == 11
FERRY_TEST_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "FerryTest",
    .init = initV11,
    .devices = devices,
    .getProperties = getPropertiesV11,
    .listen = listenV11,
    .connect = connectV11,
    .accept = acceptV11,
    .regMr = regMrCommon,
    .regMrDmaBuf = nullptr,
    .deregMr = deregMr,
    .isend = isendV11,
    .irecv = irecvV11,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = nullptr,
    .finalize = finalizeV11,
    .setNetAttr = nullptr,
};
#else
FERRY_TEST_EXPORT ncclNet_v6_t ncclNetPlugin_v6 = {
    .name = "FerryTest",
    .init = initV6,
    .devices = devices,
    .getProperties = getPropertiesV6,
    .listen = listenCommon,
    .connect = connectCommon,
    .accept = acceptCommon,
    .regMr = regMrV6,
    .regMrDmaBuf = nullptr,
    .deregMr = deregMr,
    .isend = isendV6,
    .irecv = irecvV6,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
};
#endif
}  // extern "C"
