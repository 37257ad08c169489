// Bootstrap entry points: unique ids, the rank side of the root handshake,
// and BootstrapOptions. The mesh itself lives in ring_bootstrap.cc, the root
// thread in root.cc.
#include "bootstrap/bootstrap.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

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

// Rank side of the root handshake, first half: connect and send the hello
// (as rank `rank` of `nranks` at this root).
Status sendHello(const UniqueIdInfo& id, int rank, int nranks, const SocketAddress& listen,
                 const WaitContext& wait, Socket* root) {
  FERRY_CHECK(Socket::connect(id.root, wait, "the bootstrap root", root));
  RootHello hello{static_cast<uint32_t>(rank), static_cast<uint32_t>(nranks), listen};
  auto frame = encodeFrame(id.magic, FrameType::kRootHello, rank, 0, encodeRootHello(hello));
  return root->sendAll(frame.data(), frame.size(), wait, "sending the hello to the root");
}

// Second half: the successor's address back.
Status awaitReply(const UniqueIdInfo& id, int rank, int nranks, const Socket& root,
                  const WaitContext& wait, RootReply* reply) {
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

Status helloRoot(const UniqueIdInfo& id, int rank, int nranks, const SocketAddress& listen,
                 const WaitContext& wait, RootReply* reply) {
  Socket root;
  FERRY_CHECK(sendHello(id, rank, nranks, listen, wait, &root));
  return awaitReply(id, rank, nranks, root, wait, reply);
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

Status createFreshUniqueId(const Params& params, ncclUniqueId* id) {
  BootstrapOptions opts = BootstrapOptions::fromParams(params);
  opts.commId.clear();
  return createUniqueId(opts, id);
}

namespace {

// Scalable init: root k serves the ranks [sliceStart(k), sliceStart(k+1)).
int sliceStart(int k, int nranks, int nId) {
  return static_cast<int>(static_cast<int64_t>(k) * nranks / nId);
}

int sliceOf(int rank, int nranks, int nId) {
  int k = 0;
  while (sliceStart(k + 1, nranks, nId) <= rank) ++k;
  return k;
}

// Decodes every id; identical ids (NCCL_COMM_ID gives the same one each
// time) count as one.
Status decodeIds(const ncclUniqueId* ids, int nId, std::vector<UniqueIdInfo>* out) {
  bool allSame = true;
  for (int k = 0; k < nId; ++k) {
    UniqueIdInfo info;
    std::string why;
    if (decodeUniqueId(ids[k], &info, &why) != ncclSuccess) {
      FERRY_FAIL(ncclInvalidArgument, "bootstrap: invalid unique id %d: %s", k, why.c_str());
    }
    out->push_back(info);
    allSame = allSame && memcmp(&ids[k], &ids[0], sizeof(ncclUniqueId)) == 0;
  }
  if (allSame) out->resize(1);
  for (const UniqueIdInfo& info : *out) {
    if (info.commIdMode && out->size() > 1) {
      FERRY_FAIL(ncclInvalidUsage,
                 "bootstrap: an id made under NCCL_COMM_ID (one fixed root address) cannot be "
                 "one of several unique ids");
    }
  }
  return ncclSuccess;
}

// The rank side of several roots. Rank r says hello to its slice's root as
// rank r - lo of (slice size + 1); the first rank of each slice also says
// hello to the previous slice's root as its last rank, so that root can
// give its own last rank a successor. The roots run unchanged.
Status helloRoots(const std::vector<UniqueIdInfo>& infos, int rank, int nranks,
                  const SocketAddress& listen, const WaitContext& wait, RootReply* reply) {
  const int nId = static_cast<int>(infos.size());
  if (nId == 1) return helloRoot(infos[0], rank, nranks, listen, wait, reply);
  const int k = sliceOf(rank, nranks, nId);
  const int lo = sliceStart(k, nranks, nId);
  const int size = sliceStart(k + 1, nranks, nId) - lo;
  Socket own, extra;
  FERRY_CHECK(sendHello(infos[k], rank - lo, size + 1, listen, wait, &own));
  const int pk = (k + nId - 1) % nId;
  const int prevSize = sliceStart(pk + 1, nranks, nId) - sliceStart(pk, nranks, nId);
  if (rank == lo) FERRY_CHECK(sendHello(infos[pk], prevSize, prevSize + 1, listen, wait, &extra));
  FERRY_CHECK(awaitReply(infos[k], rank - lo, size + 1, own, wait, reply));
  reply->successorRank = static_cast<uint32_t>((rank + 1) % nranks);
  RootReply ignored;  // the previous root's answer to its extra rank
  if (rank == lo) FERRY_CHECK(awaitReply(infos[pk], prevSize, prevSize + 1, extra, wait, &ignored));
  return ncclSuccess;
}

}  // namespace

Status Bootstrap::create(const ncclUniqueId& id, int rank, int nranks,
                         const BootstrapOptions& options, std::unique_ptr<Bootstrap>* out) {
  return createScalable(&id, 1, rank, nranks, options, out);
}

Status Bootstrap::createScalable(const ncclUniqueId* ids, int nId, int rank, int nranks,
                                 const BootstrapOptions& options, std::unique_ptr<Bootstrap>* out) {
  auto t0 = Clock::now();
  if (out == nullptr || nranks < 1 || static_cast<uint32_t>(nranks) > kMaxRanks || rank < 0 ||
      rank >= nranks) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: invalid rank %d / nranks %d", rank, nranks);
  }
  if (ids == nullptr || nId < 1 || nId > nranks) {
    FERRY_FAIL(ncclInvalidArgument, "bootstrap: %d unique ids for %d ranks (1..nranks allowed)",
               nId, nranks);
  }
  std::vector<UniqueIdInfo> infos;
  FERRY_CHECK(decodeIds(ids, nId, &infos));
  const UniqueIdInfo& info = infos[0];
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
    // Each root sees its own slice's waves.
    const int nRoots = static_cast<int>(infos.size());
    const int lo = sliceStart(sliceOf(rank, nranks, nRoots), nranks, nRoots);
    int64_t wave = (rank - lo) / options.staggerRanks;
    int64_t delay = std::min<int64_t>(kStaggerMaxMs, wave * kStaggerWaveMs);
    FERRY_CHECK(sleepFor(delay, wait, "the staggered connect to the root"));
  }
  RootReply reply;
  FERRY_CHECK(helloRoots(infos, rank, nranks, impl->listenAddress(), wait, &reply));
  impl->setPeerAddress(static_cast<int>(reply.successorRank), reply.successor);
  FERRY_CHECK(impl->exchangeAddresses(wait));
  FERRY_INFO(
      kLogBootstrap,
      "Bootstrap: rank %d/%d listening on %s, ring formed in %lld ms (%zu root(s), first %s)", rank,
      nranks, impl->listenAddress().toString().c_str(), static_cast<long long>(msSince(t0)),
      infos.size(), info.root.toString().c_str());
  *out = std::move(impl);
  return ncclSuccess;
}

}  // namespace ferry::boot
