// The network engine interface (DESIGN.md layer 4, transports): what the
// proxy uses to move bytes between hosts. Two kinds implement it:
//   - the built-in socket engine (net/socket_net.h, NCCL_NET=Socket), and
//   - an NCCL net plugin loaded from a shared library (net/plugin.h,
//     NCCL_NET_PLUGIN, libnccl-net.so), adapted from whichever
//     ncclNetPlugin_vN it exports to this interface.
//
// The semantics are those of NCCL's net plugin API (newest version), so an
// adapter is a thin translation, and Ferry's own engine behaves exactly as a
// plugin would:
//   - listen() fills an opaque handle (<= kNetHandleBytes) that the peer
//     receives through the bootstrap and passes to connect();
//   - connect() and accept() never block: they return success with a null
//     comm until the connection is established; the caller calls again;
//   - isend() / irecv() never block: success with a null *request means
//     "not now, call again later"; a request is polled with test() until
//     done, after which it is gone;
//   - a send matches the receiver's next irecv in order, per connection;
//     irecv may post up to maxRecvs buffers at once (grouped receive), and
//     test() reports the size each received;
//   - memory passed to isend/irecv must be registered on that comm first
//     (regMr; kPtrHost for host memory, kPtrCuda for device memory when the
//     engine's properties say it can).
// Status codes: ncclSuccess, ncclSystemError (the network or the peer
// failed: a connection reset, a peer that closed), ncclInvalidArgument /
// ncclInvalidUsage (the caller's mistake), ncclInternalError.
//
// Threading: an engine and its comms are used by one thread at a time (the
// proxy thread), except properties()/devices(), which any thread may call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace ferry::net {

// NCCL_NET_HANDLE_MAXSIZE: the listen handle travels in this many bytes.
constexpr size_t kNetHandleBytes = 128;

// Pointer kinds an engine can send from / receive into (NCCL_PTR_*).
constexpr int kPtrHost = 0x1;
constexpr int kPtrCuda = 0x2;
constexpr int kPtrDmabuf = 0x4;

struct NetProperties {
  std::string name;     // interface / device name, e.g. "eth0", "mlx5_0"
  std::string pciPath;  // sysfs PCI path, may be empty
  uint64_t guid = 0;
  int ptrSupport = kPtrHost;  // kPtr* bits
  bool regIsGlobal = false;   // a registration is valid on every comm
  bool forceFlush = false;    // receives into GPU memory need iflush
  int speedMbps = 0;
  int port = 0;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 1;          // buffers one irecv may post
  uint64_t maxP2pBytes = 0;  // largest single isend/irecv (0: no limit)
  uint64_t maxCollBytes = 0;
};

class NetEngine {
 public:
  virtual ~NetEngine() = default;
  // "Socket", or the plugin's own name ("IB", "AWS Libfabric", ...).
  virtual const char* name() const = 0;
  [[nodiscard]] virtual Status devices(int* count) = 0;
  [[nodiscard]] virtual Status properties(int dev, NetProperties* out) = 0;

  [[nodiscard]] virtual Status listen(int dev, void* handle, void** listenComm) = 0;
  // `handle` is the caller's own writable copy, passed again on every retry:
  // plugins keep connection progress inside it between calls.
  [[nodiscard]] virtual Status connect(int dev, void* handle, void** sendComm) = 0;
  [[nodiscard]] virtual Status accept(void* listenComm, void** recvComm) = 0;

  // type: kPtrHost or kPtrCuda.
  [[nodiscard]] virtual Status regMr(void* comm, void* data, size_t size, int type,
                                     void** mhandle) = 0;
  [[nodiscard]] virtual Status deregMr(void* comm, void* mhandle) = 0;

  [[nodiscard]] virtual Status isend(void* sendComm, void* data, size_t size, int tag,
                                     void* mhandle, void** request) = 0;
  [[nodiscard]] virtual Status irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                                     void** mhandles, void** request) = 0;
  // Makes GPU-memory receives of `request` visible to the GPU (only where
  // properties say forceFlush); *request null when nothing needs doing.
  [[nodiscard]] virtual Status iflush(void* recvComm, int n, void** data, int* sizes,
                                      void** mhandles, void** request) = 0;
  // *done = 1 once complete; sizes (n entries for a receive, 1 for a send)
  // then hold the bytes moved.
  [[nodiscard]] virtual Status test(void* request, int* done, size_t* sizes) = 0;

  [[nodiscard]] virtual Status closeSend(void* sendComm) = 0;
  [[nodiscard]] virtual Status closeRecv(void* recvComm) = 0;
  [[nodiscard]] virtual Status closeListen(void* listenComm) = 0;
};

}  // namespace ferry::net
