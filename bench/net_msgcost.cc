// ferry-net-msgcost: what one message costs the built-in socket engine
// (net/socket_net.h; NOTES.md trap 77), without GPUs. Two engines in one
// process over loopback, each driven by its own thread as a proxy drives
// it (spinning on test()), and the same over one plain TCP socket pair:
//   - ping-pong: a message of S bytes one way, then one back; half the
//     round trip is the one-way latency, hand-offs included;
//   - stream: messages of S bytes one way with up to `depth` in flight.
// The gap between the engine's one-way latency and raw TCP's at the same
// size is what the engine adds per message (helper wake-ups, the
// announcement on the control socket, the receiver's proxy pass).
// Usage: ferry-net-msgcost [--sizes 64K,128K,...] [--rounds N] [--depth D]
//   knobs from the environment (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD;
//   NCCL_SOCKET_IFNAME defaults to lo).
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "core/params.h"
#include "net/socket_net.h"

namespace {

using ferry::Status;
using ferry::net::NetEngine;
using Clock = std::chrono::steady_clock;

constexpr int kWaitS = 10;  // longest any single wait may take

double usSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

bool expired(Clock::time_point start) {
  return Clock::now() - start > std::chrono::seconds(kWaitS);
}

// One direction: a send comm on one engine, its receive comm on the other.
struct Link {
  NetEngine* sendNet = nullptr;
  NetEngine* recvNet = nullptr;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ~Link() {
    if (send != nullptr) (void)sendNet->closeSend(send);
    if (recv != nullptr) (void)recvNet->closeRecv(recv);
    if (listen != nullptr) (void)recvNet->closeListen(listen);
  }
};

bool connectLink(Link* l) {
  char handle[ferry::net::kNetHandleBytes] = {};
  if (l->recvNet->listen(0, handle, &l->listen) != ncclSuccess) return false;
  const auto start = Clock::now();
  while (l->send == nullptr || l->recv == nullptr) {
    if (l->send == nullptr && l->sendNet->connect(0, handle, &l->send) != ncclSuccess) return false;
    if (l->recv == nullptr && l->recvNet->accept(l->listen, &l->recv) != ncclSuccess) return false;
    if (expired(start)) return false;
  }
  return true;
}

// Spins on test() as the proxy does, yielding the CPU between passes (as
// its spin window does: on few cores a spinner that never yields starves
// the helper threads); false on an error or after kWaitS.
bool waitDone(NetEngine* net, void* req) {
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    size_t size = 0;
    if (net->test(req, &done, &size) != ncclSuccess) return false;
    if (done != 0) return true;
    if (expired(start)) return false;
    std::this_thread::yield();
  }
}

void* postSend(const Link& l, void* data, size_t n) {
  const auto start = Clock::now();
  void* req = nullptr;
  while (req == nullptr && !expired(start)) {
    if (l.sendNet->isend(l.send, data, n, 0, nullptr, &req) != ncclSuccess) return nullptr;
  }
  return req;
}

void* postRecv(const Link& l, void* data, size_t n) {
  const auto start = Clock::now();
  void* req = nullptr;
  while (req == nullptr && !expired(start)) {
    int tag = 0;
    void* mh = nullptr;
    if (l.recvNet->irecv(l.recv, 1, &data, &n, &tag, &mh, &req) != ncclSuccess) return nullptr;
  }
  return req;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median one-way us: ab carries the ping (engine A sends), ba the pong.
double enginePingPong(const Link& ab, const Link& ba, size_t bytes, int rounds) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  // Each thread keeps its own verdict (every wait is bounded, so neither
  // needs to see the other's failure to finish).
  bool peerOk = true;
  std::thread peer([&] {
    for (int r = 0; r < rounds + 1 && peerOk; ++r) {
      void* rr = postRecv(ab, b.data(), bytes);
      peerOk = rr != nullptr && waitDone(ab.recvNet, rr);
      void* sr = peerOk ? postSend(ba, b.data(), bytes) : nullptr;
      peerOk = peerOk && sr != nullptr && waitDone(ba.sendNet, sr);
    }
  });
  bool ok = true;
  std::vector<double> us;
  for (int r = 0; r < rounds + 1 && ok; ++r) {
    const auto t0 = Clock::now();
    void* rr = postRecv(ba, a.data(), bytes);
    void* sr = postSend(ab, a.data(), bytes);
    ok = rr != nullptr && sr != nullptr && waitDone(ab.sendNet, sr) && waitDone(ba.recvNet, rr);
    if (r > 0) us.push_back(usSince(t0) / 2);  // round 0 warms up
  }
  peer.join();
  return ok && peerOk ? median(us) : -1;
}

// GB/s of `count` messages one way, `depth` in flight on each side.
double engineStream(const Link& ab, size_t bytes, int count, int depth) {
  std::vector<char> src(bytes * depth, 3), dst(bytes * depth, 0);
  auto run = [&](bool send) {
    bool ok = true;
    std::vector<void*> inflight;
    NetEngine* net = send ? ab.sendNet : ab.recvNet;
    for (int i = 0; i < count && ok; ++i) {
      if (static_cast<int>(inflight.size()) == depth) {
        ok = waitDone(net, inflight.front());
        inflight.erase(inflight.begin());
      }
      char* at = (send ? src.data() : dst.data()) + (i % depth) * bytes;
      void* req = send ? postSend(ab, at, bytes) : postRecv(ab, at, bytes);
      ok = ok && req != nullptr;
      inflight.push_back(req);
    }
    for (void* req : inflight) ok = ok && req != nullptr && waitDone(net, req);
    return ok;
  };
  const auto t0 = Clock::now();
  bool received = false;
  std::thread receiver([&] { received = run(false); });
  const bool sent = run(true);
  receiver.join();
  return sent && received ? static_cast<double>(bytes) * count / usSince(t0) / 1e3 : -1;
}

// Exactly n bytes, spinning (one non-blocking call at a time, yielding
// when the socket has nothing) as the engine's threads do, so that the two
// compare without a sleeping thread's wake-up on one side only; false on an
// error, a closed peer or after kWaitS.
bool ioAll(const ferry::boot::Socket& sock, char* p, size_t n, bool send) {
  const auto start = Clock::now();
  while (n > 0) {
    size_t k = 0;
    bool closed = false;
    const Status st = send ? sock.sendSome(p, n, &k) : sock.recvSome(p, n, &k, &closed);
    if (st != ncclSuccess || closed || expired(start)) return false;
    if (k == 0) std::this_thread::yield();
    p += k;
    n -= k;
  }
  return true;
}

// Raw TCP ping-pong over one loopback socket pair (bootstrap sockets:
// non-blocking I/O, TCP_NODELAY): the floor under the engine for messages
// one stream carries as fast as the engine's several (up to a few hundred
// KiB on loopback); above that the engine's streams win on bandwidth and
// the difference is no longer its cost per message.
double tcpPingPong(size_t bytes, int rounds) {
  using ferry::boot::Socket;
  using ferry::boot::SocketAddress;
  const auto wait = ferry::boot::WaitContext::make(kWaitS * 1000, nullptr);
  SocketAddress any;
  Socket listener, a, b;
  if (SocketAddress::parse("127.0.0.1:0", &any) != ncclSuccess ||
      Socket::listen(any, false, &listener) != ncclSuccess ||
      Socket::connect(listener.localAddress(), wait, "msgcost tcp", &a) != ncclSuccess ||
      listener.accept(wait, "msgcost tcp", &b) != ncclSuccess) {
    return -1;
  }
  std::vector<char> mine(bytes, 1), theirs(bytes, 2);
  std::thread peer([&] {
    for (int r = 0; r < rounds + 1; ++r) {
      if (!ioAll(b, theirs.data(), bytes, false) || !ioAll(b, theirs.data(), bytes, true)) return;
    }
  });
  std::vector<double> us;
  bool ok = true;
  for (int r = 0; r < rounds + 1 && ok; ++r) {
    const auto t0 = Clock::now();
    ok = ioAll(a, mine.data(), bytes, true) && ioAll(a, mine.data(), bytes, false);
    if (r > 0) us.push_back(usSince(t0) / 2);
  }
  // On a failure the peer sees the connection end instead of waiting out kWaitS.
  if (!ok) ::shutdown(a.fd(), SHUT_RDWR);
  peer.join();
  return ok ? median(us) : -1;
}

bool parseSizes(const std::string& text, std::vector<size_t>* out) {
  size_t b = 0;
  while (b <= text.size()) {
    size_t e = text.find(',', b);
    if (e == std::string::npos) e = text.size();
    int64_t v = 0;
    if (!ferry::parseParamInt(text.substr(b, e - b), &v) || v <= 0) return false;
    out->push_back(static_cast<size_t>(v));
    b = e + 1;
  }
  return !out->empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  std::string sizeText = "16K,64K,65552,128K,256K,512K,1M,4M";
  int rounds = 200;
  int depth = 8;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 == argc) {
      fprintf(stderr, "%s needs a value\n", k.c_str());
      return 2;
    }
    if (k == "--sizes") {
      sizeText = argv[i + 1];
    } else if (k == "--rounds") {
      rounds = std::max(1, atoi(argv[i + 1]));
    } else if (k == "--depth") {
      depth = std::max(1, atoi(argv[i + 1]));
    } else {
      fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (!parseSizes(sizeText, &sizes)) {
    fprintf(stderr, "--sizes %s: expected a comma-separated list of sizes (K/M/G)\n",
            sizeText.c_str());
    return 2;
  }
  if (getenv("NCCL_SOCKET_IFNAME") == nullptr) setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  const ferry::Params params = ferry::Params::load();
  std::unique_ptr<NetEngine> netA, netB;
  if (ferry::net::createSocketNet(params, &netA) != ncclSuccess ||
      ferry::net::createSocketNet(params, &netB) != ncclSuccess) {
    fprintf(stderr, "cannot create the socket engine\n");
    return 1;
  }
  Link ab{netA.get(), netB.get()};
  Link ba{netB.get(), netA.get()};
  if (!connectLink(&ab) || !connectLink(&ba)) {
    fprintf(stderr, "cannot connect over loopback\n");
    return 1;
  }
  const ferry::net::SocketNetLayout layout = ferry::net::socketNetCommLayout(ab.send);
  printf(
      "# socket engine, %d helper threads x %d sockets per connection; ping-pong median of "
      "%d rounds; stream of %d-deep messages\n",
      layout.nThreads, layout.nSocksPerThread, rounds, depth);
  printf("# %10s %14s %16s %14s %14s\n", "bytes", "engine us 1way", "1 tcp stream us",
         "engine - tcp", "stream GB/s");
  for (size_t s : sizes) {
    const double e = enginePingPong(ab, ba, s, rounds);
    const double t = tcpPingPong(s, rounds);
    const int count = static_cast<int>(std::max<size_t>(4 * depth, (size_t{1} << 30) / s / 4));
    const double g = engineStream(ab, s, std::min(count, 4096), depth);
    if (e < 0 || t < 0 || g < 0) {
      fprintf(stderr, "%zu bytes: a transfer failed or timed out\n", s);
      return 1;
    }
    printf("  %10zu %14.1f %16.1f %14.1f %14.2f\n", s, e, t, e - t, g);
  }
  return 0;
}
