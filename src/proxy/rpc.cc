#include "proxy/rpc.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/unix_socket.h"
#include "runtime/runtime.h"

namespace ferry {
namespace {

constexpr uint64_t kRpcMagic = 0x4665727279525043ULL;  // "FerryRPC"

struct Request {
  uint64_t magic;
  uint32_t kind;
  uint32_t reserved;
  uint64_t a;
  uint64_t b;
};
struct Reply {
  uint64_t magic;
  uint32_t status;
  uint32_t blobBytes;
  uint64_t size;
  uint8_t blob[RpcServer::kMaxBlob];
};
static_assert(sizeof(Request) == 32 && sizeof(Reply) == 24 + RpcServer::kMaxBlob);

std::string uniqueName() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[64];
  snprintf(buf, sizeof(buf), "ferry-proxy-%d-%016llx", getpid(),
           static_cast<unsigned long long>(r));
  return buf;
}

Status decodeReply(const Reply& reply, size_t got, int numFds, UniqueFd* fds, UniqueFd* fd,
                   uint64_t* size, std::vector<uint8_t>* blob) {
  if (got != sizeof(Reply) || reply.magic != kRpcMagic || reply.blobBytes > RpcServer::kMaxBlob) {
    FERRY_FAIL(ncclRemoteError, "proxy RPC: malformed reply (%zu bytes)", got);
  }
  if (reply.status != ncclSuccess) {
    FERRY_WARN("proxy RPC: peer refused the request: %s",
               statusString(static_cast<Status>(reply.status)));
    return static_cast<Status>(reply.status);
  }
  if (blob != nullptr) blob->assign(reply.blob, reply.blob + reply.blobBytes);
  const bool blobOnly = blob != nullptr && reply.blobBytes > 0;
  if (numFds != 1 && !blobOnly) {
    FERRY_FAIL(ncclRemoteError, "proxy RPC: reply without a descriptor");
  }
  if (numFds == 1) *fd = std::move(fds[0]);
  *size = reply.size;
  return ncclSuccess;
}

}  // namespace

RpcServer::~RpcServer() = default;

Status RpcServer::create(rt::Runtime* hostRuntime, std::unique_ptr<RpcServer>* out) {
  std::string name = uniqueName();
  UniqueFd listen;
  FERRY_CHECK(unixListen(name, &listen));
  out->reset(new RpcServer(name, std::move(listen), hostRuntime));
  return ncclSuccess;
}

Status RpcServer::addResource(uint64_t a, uint64_t b, int fd, uint64_t size, const void* blob,
                              size_t blobBytes) {
  if (blobBytes > kMaxBlob || (fd < 0 && blobBytes == 0)) {
    FERRY_FAIL(ncclInternalError, "proxy RPC: a resource needs an fd or a blob of <= %zu bytes",
               kMaxBlob);
  }
  Resource r;
  if (fd >= 0) {
    r.fd = UniqueFd(dup(fd));
    if (!r.fd) {
      FERRY_FAIL(ncclSystemError, "dup of a shared resource fd failed: %s", strerror(errno));
    }
  }
  r.size = size;
  if (blobBytes > 0) {
    const auto* bytes = static_cast<const uint8_t*>(blob);
    r.blob.assign(bytes, bytes + blobBytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  resources_[{a, b}] = std::move(r);
  return ncclSuccess;
}

uint64_t RpcServer::addProvider(uint64_t a, Provider provider) {
  std::lock_guard<std::mutex> lock(providerMu_);
  const uint64_t id = nextProvider_++;
  providers_.push_back(ProviderEntry{id, a, std::move(provider)});
  return id;
}

void RpcServer::removeProvider(uint64_t id) {
  std::lock_guard<std::mutex> lock(providerMu_);
  providers_.erase(std::remove_if(providers_.begin(), providers_.end(),
                                  [id](const ProviderEntry& p) { return p.id == id; }),
                   providers_.end());
}

bool RpcServer::lookup(uint64_t a, uint64_t b, UniqueFd* fd, uint64_t* size,
                       std::vector<uint8_t>* blob) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = resources_.find({a, b});
      if (it != resources_.end()) {
        if (it->second.fd) *fd = UniqueFd(dup(it->second.fd.get()));
        *size = it->second.size;
        *blob = it->second.blob;
        return !it->second.fd || *fd;
      }
    }
    if (attempt == 1) break;
    // Not there: the providers of `a` may make it (outside mu_: they add it).
    std::lock_guard<std::mutex> lock(providerMu_);
    for (ProviderEntry& p : providers_) {
      if (p.a == a) p.fn(b);
    }
  }
  return false;
}

void RpcServer::removeResource(uint64_t a, uint64_t b) {
  std::lock_guard<std::mutex> lock(mu_);
  resources_.erase({a, b});
}

void RpcServer::pollFds(std::vector<int>* out) const {
  out->push_back(listen_.get());
  for (const UniqueFd& c : clients_) out->push_back(c.get());
}

void RpcServer::serve() {
  for (;;) {  // accept everything waiting (poll first: an empty try is not an error)
    pollfd l{listen_.get(), POLLIN, 0};
    if (poll(&l, 1, 0) != 1) break;
    UniqueFd client;
    if (unixAccept(listen_.get(), &client, 0) != ncclSuccess) break;
    clients_.push_back(std::move(client));
  }
  for (size_t i = 0; i < clients_.size();) {
    pollfd p{clients_[i].get(), POLLIN, 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      answer(i);
    }
    if (!clients_[i]) {
      clients_.erase(clients_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

// Answers one request; a closed or misbehaving client loses its connection.
void RpcServer::answer(size_t index) {
  UniqueFd& client = clients_[index];
  Request req{};
  size_t got = 0;
  int numFds = 0;
  char probe = 0;
  if (recv(client.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
    client.reset();  // the client's process closed it (exit or destroy): not an error
    return;
  }
  if (unixRecvMsg(client.get(), &req, sizeof(req), &got, nullptr, 0, &numFds, 0) != ncclSuccess ||
      got != sizeof(req) || req.magic != kRpcMagic) {
    client.reset();
    return;
  }
  Reply reply{};
  reply.magic = kRpcMagic;
  reply.status = ncclSuccess;
  UniqueFd held;
  int fd = -1;
  bool blobOnly = false;
  if (req.kind == static_cast<uint32_t>(RpcKind::Resource)) {
    std::vector<uint8_t> blob;
    if (!lookup(req.a, req.b, &held, &reply.size, &blob)) {
      reply.status = ncclInvalidArgument;
    } else {
      reply.blobBytes = static_cast<uint32_t>(blob.size());
      if (!blob.empty()) memcpy(reply.blob, blob.data(), blob.size());
      blobOnly = !held && !blob.empty();
    }
  } else if (req.kind == static_cast<uint32_t>(RpcKind::Allocation) && hostRuntime_ != nullptr) {
    Status s = hostRuntime_->exportAllocationFd(req.a, &held);
    reply.status = s;
  } else {
    reply.status = ncclInvalidArgument;
  }
  fd = held.get();
  if (reply.status == ncclSuccess && fd < 0 && !blobOnly) reply.status = ncclSystemError;
  Status s = unixSendMsg(client.get(), &reply, sizeof(reply), &fd,
                         reply.status == ncclSuccess && fd >= 0 ? 1 : 0, 1000);
  if (s != ncclSuccess) client.reset();
}

Status RpcClient::connect(const std::string& serverName, int64_t timeoutMs,
                          const std::atomic<bool>* abortFlag, std::unique_ptr<RpcClient>* out) {
  UniqueFd sock;
  FERRY_CHECK(unixConnect(serverName, &sock, timeoutMs, abortFlag));
  out->reset(new RpcClient(std::move(sock)));
  return ncclSuccess;
}

Status RpcClient::fetch(RpcKind kind, uint64_t a, uint64_t b, int64_t timeoutMs,
                        const std::atomic<bool>* abortFlag, UniqueFd* fd, uint64_t* size,
                        std::vector<uint8_t>* blob) {
  FERRY_CHECK(startFetch(kind, a, b));
  Reply reply{};
  size_t got = 0;
  int numFds = 0;
  UniqueFd fds[1];
  pending_ = false;
  FERRY_CHECK(
      unixRecvMsg(sock_.get(), &reply, sizeof(reply), &got, fds, 1, &numFds, timeoutMs, abortFlag));
  return decodeReply(reply, got, numFds, fds, fd, size, blob);
}

Status RpcClient::startFetch(RpcKind kind, uint64_t a, uint64_t b) {
  if (pending_) FERRY_FAIL(ncclInternalError, "proxy RPC: a request is already pending");
  Request req{kRpcMagic, static_cast<uint32_t>(kind), 0, a, b};
  FERRY_CHECK(unixSendMsg(sock_.get(), &req, sizeof(req), nullptr, 0, 1000));
  pending_ = true;
  return ncclSuccess;
}

Status RpcClient::pollFetch(UniqueFd* fd, uint64_t* size) {
  if (!pending_) FERRY_FAIL(ncclInternalError, "proxy RPC: no request pending");
  pollfd p{sock_.get(), POLLIN, 0};
  if (poll(&p, 1, 0) != 1) return ncclInProgress;
  Reply reply{};
  size_t got = 0;
  int numFds = 0;
  UniqueFd fds[1];
  pending_ = false;
  FERRY_CHECK(unixRecvMsg(sock_.get(), &reply, sizeof(reply), &got, fds, 1, &numFds, 0));
  return decodeReply(reply, got, numFds, fds, fd, size, nullptr);
}

bool RpcClient::peerClosed() {
  pollfd p{sock_.get(), POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ferry
