// Wire formats and small socket helpers of the socket engine
// (socket_net_internal.h describes the layouts).
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/log.h"
#include "net/socket_net_internal.h"

namespace ferry::net::sock {

namespace {

void put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool wouldBlock(int err) {
  return err == EAGAIN || err == EWOULDBLOCK;
}

bool resetLike(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT;
}

}  // namespace

void encodeHandle(const boot::SocketAddress& addr, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  memset(p, 0, kNetHandleBytes);
  put64(p, kMagic);
  put32(p + 8, kVersion);
  put16(p + 12, static_cast<uint16_t>(addr.family()));
  put16(p + 14, addr.port());
  (void)addr.ipBytes(p + 16);
  put32(p + 32, addr.scopeId());
}

Status decodeHandle(const void* in, boot::SocketAddress* out) {
  if (in == nullptr) FERRY_FAIL(ncclInvalidArgument, "net/socket: connect with a null handle");
  const auto* p = static_cast<const uint8_t*>(in);
  if (get64(p) != kMagic || get32(p + 8) != kVersion) {
    FERRY_FAIL(ncclInvalidArgument,
               "net/socket: connect handle is not a socket-engine handle (magic %llx version %u)",
               static_cast<unsigned long long>(get64(p)), get32(p + 8));
  }
  int family = get16(p + 12);
  uint16_t port = get16(p + 14);
  if ((family != AF_INET && family != AF_INET6) || port == 0) {
    FERRY_FAIL(ncclInvalidArgument, "net/socket: connect handle has family %d port %u", family,
               port);
  }
  *out = boot::SocketAddress::fromIp(family, p + 16, port, get32(p + 32));
  return ncclSuccess;
}

void encodeHello(const Hello& h, uint8_t out[kHelloBytes]) {
  memset(out, 0, kHelloBytes);
  put64(out, kMagic);
  put32(out + 8, kVersion);
  put16(out + 12, static_cast<uint16_t>(h.index));
  put16(out + 14, static_cast<uint16_t>(h.count));
  put16(out + 16, static_cast<uint16_t>(h.nThreads));
  put64(out + 24, h.connId);
}

bool magicPrefixOk(const uint8_t* in, size_t n) {
  uint8_t magic[8];
  put64(magic, kMagic);
  return memcmp(in, magic, n < 8 ? n : 8) == 0;
}

bool decodeHello(const uint8_t* in, Hello* out, std::string* why) {
  auto reject = [why](std::string reason) {
    *why = std::move(reason);
    return false;
  };
  if (get64(in) != kMagic) return reject("bad magic");
  if (get32(in + 8) != kVersion) return reject("version " + std::to_string(get32(in + 8)));
  if (get16(in + 18) != 0 || get32(in + 20) != 0) return reject("reserved bytes set");
  Hello h;
  h.index = get16(in + 12);
  h.count = get16(in + 14);
  h.nThreads = get16(in + 16);
  h.connId = get64(in + 24);
  if (h.count < 2 || h.count - 1 > static_cast<uint32_t>(kMaxDataSocks)) {
    return reject("socket count " + std::to_string(h.count));
  }
  if (h.index >= h.count) {
    return reject("index " + std::to_string(h.index) + " of " + std::to_string(h.count));
  }
  uint32_t nData = h.count - 1;
  if (h.nThreads < 1 || h.nThreads > static_cast<uint32_t>(kMaxThreads) || nData % h.nThreads ||
      nData / h.nThreads > static_cast<uint32_t>(kMaxSocksPerThread)) {
    return reject("thread count " + std::to_string(h.nThreads));
  }
  if (h.connId == 0) return reject("connection id 0");
  *out = h;
  return true;
}

void encodeCtrl(uint32_t seq, uint64_t size, uint8_t out[kCtrlBytes]) {
  put32(out, kCtrlTag);
  put32(out + 4, seq);
  put64(out + 8, size);
}

bool decodeCtrl(const uint8_t* in, uint32_t* seq, uint64_t* size) {
  if (get32(in) != kCtrlTag) return false;
  *seq = get32(in + 4);
  *size = get64(in + 8);
  return true;
}

void planChunks(uint64_t size, int nData, uint64_t* chunkBytes, uint32_t* nChunks) {
  // At most one chunk per socket (fewest syscalls and hand-offs), at least
  // kMinChunkBytes so small messages do not pay for many sockets; 4 KiB
  // aligned so chunk boundaries stay page-friendly.
  uint64_t perSock = (size + static_cast<uint64_t>(nData) - 1) / static_cast<uint64_t>(nData);
  perSock = (perSock + 4095) & ~uint64_t{4095};
  *chunkBytes = perSock > kMinChunkBytes ? perSock : kMinChunkBytes;
  *nChunks = static_cast<uint32_t>((size + *chunkBytes - 1) / *chunkBytes);
}

uint64_t newConnectionId() {
  uint64_t id = 0;
  ssize_t n = getrandom(&id, sizeof(id), GRND_NONBLOCK);
  if (n != static_cast<ssize_t>(sizeof(id))) {
    // No entropy yet (early boot): uniqueness, not secrecy, is what matters,
    // so mix time, pid and a process-wide counter through splitmix64.
    static std::atomic<uint64_t> counter{0};
    uint64_t z =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(getpid()) << 32) ^
        (counter.fetch_add(1, std::memory_order_relaxed) * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    id = z ^ (z >> 31);
  }
  return id == 0 ? 1 : id;
}

IoResult sendSome(int fd, const void* data, size_t bytes, size_t* moved, int* err) {
  *moved = 0;
  *err = 0;
  for (;;) {
    ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      *moved = static_cast<size_t>(n);
      return n > 0 || bytes == 0 ? IoResult::kProgress : IoResult::kWouldBlock;
    }
    if (errno == EINTR) continue;
    *err = errno;
    if (wouldBlock(errno)) return IoResult::kWouldBlock;
    return resetLike(errno) ? IoResult::kClosed : IoResult::kError;
  }
}

IoResult recvSome(int fd, void* data, size_t bytes, size_t* moved, int* err) {
  *moved = 0;
  *err = 0;
  for (;;) {
    ssize_t n = ::recv(fd, data, bytes, MSG_DONTWAIT);
    if (n > 0) {
      *moved = static_cast<size_t>(n);
      return IoResult::kProgress;
    }
    if (n == 0) return bytes == 0 ? IoResult::kProgress : IoResult::kClosed;
    if (errno == EINTR) continue;
    *err = errno;
    if (wouldBlock(errno)) return IoResult::kWouldBlock;
    return resetLike(errno) ? IoResult::kClosed : IoResult::kError;
  }
}

}  // namespace ferry::net::sock
