// Bootstrap entry points: unique ids, the rank side of the root handshake,
// and BootstrapOptions. The mesh itself lives in ring_bootstrap.cc, the root
// thread in root.cc.
#include "bootstrap/bootstrap.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "bootstrap/ifaddr.h"
#include "bootstrap/ring_bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"
#include "core/log.h"

namespace ferry::boot {

namespace {

// Connects to the root above this many ranks are spread in waves: rank r
// waits (r / staggerRanks) * kStaggerWaveMs, capped at kStaggerMaxMs, so the
// root's accept queue sees about staggerRanks new connections per wave.
constexpr int64_t kStaggerWaveMs = 10;
constexpr int64_t kStaggerMaxMs = 2000;

Status randomMagic(uint64_t* out) {
  uint64_t v = 0;
  for (int tries = 0; v == 0 && tries < 8; ++tries) {
    ssize_t n = getrandom(&v, sizeof(v), 0);
    if (n != static_cast<ssize_t>(sizeof(v))) {
      if (n < 0 && errno == EINTR) continue;
      FERRY_FAIL(ncclSystemError, "bootstrap: getrandom failed: %s", strerror(errno));
    }
  }
  if (v == 0) FERRY_FAIL(ncclSystemError, "bootstrap: could not draw a non-zero magic");
  *out = v;
  return ncclSuccess;
}

int64_t msSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Rank side of the root handshake: hello out, successor address back.
Status helloRoot(const UniqueIdInfo& id, int rank, int nranks, const SocketAddress& listen,
                 const WaitContext& wait, RootReply* reply) {
  Socket root;
  FERRY_CHECK(Socket::connect(id.root, wait, "the bootstrap root", &root));
  RootHello hello{static_cast<uint32_t>(rank), static_cast<uint32_t>(nranks), listen};
  auto frame = encodeFrame(id.magic, FrameType::kRootHello, rank, 0, encodeRootHello(hello));
  FERRY_CHECK(root.sendAll(frame.data(), frame.size(), wait, "sending the hello to the root"));
  uint8_t hdrBytes[kFrameHeaderBytes];
  Status st = root.recvAll(hdrBytes, sizeof(hdrBytes), wait, "the root's reply");
  if (st == ncclRemoteError) {
    FERRY_FAIL(ncclRemoteError,
               "bootstrap rank %d: the root at %s closed the connection without a reply: it "
               "rejected this hello (duplicate rank or different nranks) or timed out waiting "
               "for other ranks; see the root's WARN",
               rank, id.root.toString().c_str());
  }
  FERRY_CHECK(st);
  FrameHeader h;
  std::string why;
  if (decodeFrameHeader(hdrBytes, sizeof(hdrBytes), id.magic, &h, &why) != ncclSuccess ||
      h.type != FrameType::kRootReply || h.payloadLength != 4 + kAddressRecordBytes) {
    FERRY_FAIL(ncclRemoteError, "bootstrap rank %d: malformed reply from the root %s: %s", rank,
               id.root.toString().c_str(), why.empty() ? "wrong type or length" : why.c_str());
  }
  uint8_t body[4 + kAddressRecordBytes];
  FERRY_CHECK(root.recvAll(body, sizeof(body), wait, "the root's reply"));
  if (decodeRootReply(body, sizeof(body), reply, &why) != ncclSuccess ||
      reply->successorRank != static_cast<uint32_t>((rank + 1) % nranks)) {
    FERRY_FAIL(ncclRemoteError, "bootstrap rank %d: bad reply body from the root: %s", rank,
               why.empty() ? "wrong successor rank" : why.c_str());
  }
  return ncclSuccess;
}

Status startCommIdRoot(const UniqueIdInfo& id, const BootstrapOptions& options) {
  Socket listen;
  FERRY_CHECK(Socket::listen(id.root, /*reuseAddr=*/true, &listen));
  FERRY_CHECK(startRoot(std::move(listen), id.magic, options.timeoutMs));
  FERRY_INFO(kLogBootstrap, "Bootstrap: rank 0 serves the NCCL_COMM_ID root at %s",
             id.root.toString().c_str());
  return ncclSuccess;
}

}  // namespace

BootstrapOptions BootstrapOptions::fromParams(const Params& p) {
  BootstrapOptions o;
  // Every wait must end: a non-positive timeout is refused, not "forever".
  int64_t seconds = p.getInt(ParamId::BootstrapTimeout);
  if (seconds <= 0 || seconds > 365LL * 24 * 3600) {
    FERRY_WARN("FERRY_BOOTSTRAP_TIMEOUT=%lld is out of range; using %lld s",
               static_cast<long long>(seconds), static_cast<long long>(o.timeoutMs / 1000));
  } else {
    o.timeoutMs = seconds * 1000;
  }
  o.ifname = p.getString(ParamId::SocketIfname);
  o.family = p.getString(ParamId::SocketFamily);
  o.staggerRanks = static_cast<int>(p.getInt(ParamId::BootstrapStagger));
  o.commId = p.getString(ParamId::CommId);
  return o;
}

Status createUniqueId(const BootstrapOptions& options, ncclUniqueId* id) {
  if (id == nullptr) FERRY_FAIL(ncclInvalidArgument, "createUniqueId: null id");
  joinFinishedRoots();
  UniqueIdInfo info;
  if (!options.commId.empty()) {
    FERRY_CHECK(SocketAddress::parse(options.commId, &info.root));
    if (info.root.port() == 0) {
      FERRY_FAIL(ncclInvalidArgument, "NCCL_COMM_ID='%s' needs a non-zero port",
                 options.commId.c_str());
    }
    info.magic = magicFromCommId(options.commId);
    info.commIdMode = true;
    encodeUniqueId(info, id);
    FERRY_INFO(kLogBootstrap, "Bootstrap: unique id from NCCL_COMM_ID %s",
               info.root.toString().c_str());
    return ncclSuccess;
  }
  int family = AF_UNSPEC;
  FERRY_CHECK(parseFamily(options.family, &family));
  InterfaceAddress ia;
  FERRY_CHECK(findInterface(options.ifname, family, &ia));
  Socket listen;
  FERRY_CHECK(Socket::listen(ia.addr, /*reuseAddr=*/false, &listen));
  info.root = listen.localAddress();
  FERRY_CHECK(randomMagic(&info.magic));
  FERRY_CHECK(startRoot(std::move(listen), info.magic, options.timeoutMs));
  encodeUniqueId(info, id);
  FERRY_INFO(kLogBootstrap, "Bootstrap: root listening on %s (%s)", info.root.toString().c_str(),
             ia.name.c_str());
  return ncclSuccess;
}

Status Bootstrap::create(const ncclUniqueId& id, int rank, int nranks,
                         const BootstrapOptions& options, std::unique_ptr<Bootstrap>* out) {
  auto t0 = Clock::now();
  if (out == nullptr || nranks < 1 || static_cast<uint32_t>(nranks) > kMaxRanks || rank < 0 ||
      rank >= nranks) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: invalid rank %d / nranks %d", rank, nranks);
  }
  UniqueIdInfo info;
  std::string why;
  if (decodeUniqueId(id, &info, &why) != ncclSuccess) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: invalid unique id: %s", why.c_str());
  }
  joinFinishedRoots();
  WaitContext wait = WaitContext::make(options.timeoutMs, options.abortFlag);
  if (info.commIdMode && rank == 0) FERRY_CHECK(startCommIdRoot(info, options));

  // Our listen socket uses the root's family, so every rank can reach it.
  InterfaceAddress ia;
  FERRY_CHECK(findInterface(options.ifname, info.root.family(), &ia));
  Socket listen;
  FERRY_CHECK(Socket::listen(ia.addr, /*reuseAddr=*/false, &listen));
  auto impl = std::make_unique<RingBootstrap>(rank, nranks, info.magic, options, std::move(listen));

  if (nranks > options.staggerRanks && options.staggerRanks > 0) {
    int64_t delay =
        std::min<int64_t>(kStaggerMaxMs, (rank / options.staggerRanks) * kStaggerWaveMs);
    FERRY_CHECK(sleepFor(delay, wait, "the staggered connect to the root"));
  }
  RootReply reply;
  FERRY_CHECK(helloRoot(info, rank, nranks, impl->listenAddress(), wait, &reply));
  impl->setPeerAddress(static_cast<int>(reply.successorRank), reply.successor);
  FERRY_CHECK(impl->exchangeAddresses(wait));
  FERRY_INFO(kLogBootstrap,
             "Bootstrap: rank %d/%d listening on %s, ring formed in %lld ms (root %s)", rank,
             nranks, impl->listenAddress().toString().c_str(), static_cast<long long>(msSince(t0)),
             info.root.toString().c_str());
  *out = std::move(impl);
  return ncclSuccess;
}

}  // namespace ferry::boot
