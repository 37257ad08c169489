// The proxy's local RPC: how processes of one host hand each other file
// descriptors (memfd control blocks, host-runtime device memory) without
// sending anything process-local. Each process's proxy runs one RpcServer
// on a Linux abstract Unix socket; its name travels through the bootstrap.
//
// Wire (SOCK_SEQPACKET, one message per request/reply, both little-endian
// fixed layouts with a magic): request {magic, kind, keyA, keyB}; reply
// {magic, status, blob length, size, blob} plus at most one fd (a resource
// may be a blob alone: a CUDA IPC handle needs no descriptor). A request with a bad magic or
// length gets its connection closed (never a crash, never a hang).
//
// Threading: RpcServer is driven by the proxy thread only (serve()); its
// resource table may be changed from any thread (mutex). RpcClient calls are
// made by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/fd.h"
#include "core/status.h"

namespace ferry {

namespace rt {
class Runtime;
}

enum class RpcKind : uint32_t {
  Resource = 1,    // a registered (keyA, keyB) resource: control block, FIFO memory
  Allocation = 2,  // the memfd of a host-runtime allocation: keyA = allocation id
};

class RpcServer {
 public:
  ~RpcServer();
  // Listens on a fresh unique abstract name (returned by name()).
  [[nodiscard]] static Status create(rt::Runtime* hostRuntime, std::unique_ptr<RpcServer>* out);

  const std::string& name() const { return name_; }

  // Most bytes a resource's blob may hold.
  static constexpr size_t kMaxBlob = 256;
  // Offers `fd` (dup'ed; the caller keeps its own; -1: none, then `blob`
  // must be given) and `blob` (copied) under (a, b) until removed.
  [[nodiscard]] Status addResource(uint64_t a, uint64_t b, int fd, uint64_t size,
                                   const void* blob = nullptr, size_t blobBytes = 0);
  void removeResource(uint64_t a, uint64_t b);

  // Resources made on request: a request for (a, b) that finds nothing asks
  // every provider of `a` (on the proxy thread, in the order added) to add
  // it, then looks again. A provider ignores keys that are not its own.
  // removeProvider returns once no call of that provider is running.
  using Provider = std::function<void(uint64_t b)>;
  uint64_t addProvider(uint64_t a, Provider provider);
  void removeProvider(uint64_t id);

  // Accepts connections and answers every pending request without blocking.
  void serve();
  // Descriptors worth waking up for (listen socket + clients), for poll().
  void pollFds(std::vector<int>* out) const;

 private:
  RpcServer(std::string name, UniqueFd listen, rt::Runtime* hostRuntime)
      : name_(std::move(name)), listen_(std::move(listen)), hostRuntime_(hostRuntime) {}
  void answer(size_t client);
  // The resource (a, b) for a reply: dup'ed fd, size and blob; asks the
  // providers of `a` when it is missing. False when nobody has it.
  bool lookup(uint64_t a, uint64_t b, UniqueFd* fd, uint64_t* size, std::vector<uint8_t>* blob);

  struct Resource {
    UniqueFd fd;  // may be empty (blob only)
    uint64_t size = 0;
    std::vector<uint8_t> blob;
  };
  struct ProviderEntry {
    uint64_t id;
    uint64_t a;
    Provider fn;
  };

  std::string name_;
  UniqueFd listen_;
  rt::Runtime* hostRuntime_;  // for Allocation requests (host runtime); may be null
  std::vector<UniqueFd> clients_;
  std::mutex mu_;  // guards resources_
  std::map<std::pair<uint64_t, uint64_t>, Resource> resources_;
  // Held while a provider runs and while the list changes, never together
  // with mu_ taken first (providers add resources under mu_).
  std::mutex providerMu_;
  std::vector<ProviderEntry> providers_;
  uint64_t nextProvider_ = 1;
};

// A connection to one peer process's RpcServer.
class RpcClient {
 public:
  [[nodiscard]] static Status connect(const std::string& serverName, int64_t timeoutMs,
                                      const std::atomic<bool>* abortFlag,
                                      std::unique_ptr<RpcClient>* out);
  // Blocking request (user threads at setup). `blob`, when given, gets the
  // resource's blob (empty if it has none); a resource without an fd then
  // leaves *fd empty, and without `blob` a reply with no fd is an error.
  [[nodiscard]] Status fetch(RpcKind kind, uint64_t a, uint64_t b, int64_t timeoutMs,
                             const std::atomic<bool>* abortFlag, UniqueFd* fd, uint64_t* size,
                             std::vector<uint8_t>* blob = nullptr);
  // Non-blocking request for the proxy thread: start, then poll until it
  // returns something other than ncclInProgress. One request at a time.
  [[nodiscard]] Status startFetch(RpcKind kind, uint64_t a, uint64_t b);
  [[nodiscard]] Status pollFetch(UniqueFd* fd, uint64_t* size);
  // True once the peer process is gone (its end of the socket closed).
  bool peerClosed();
  int fd() const { return sock_.get(); }

 private:
  explicit RpcClient(UniqueFd sock) : sock_(std::move(sock)) {}
  UniqueFd sock_;
  bool pending_ = false;
};

}  // namespace ferry
