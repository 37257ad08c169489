// The host memory of one network connection's data path (TransportId::Net;
// the protocol: enqueue/p2p_net.cc's header comment):
//   - NetWords: four counters the connection's copy stream, the user's
//     thread and the proxy thread share (pinned, so streams read and write
//     them);
//   - a receiver's FIFO: `chunks` slots of `chunkBytes`, where the proxy
//     lands what the network brings and the copy stream picks it up;
//   - a sender's staging blocks: each send's bytes, copied out of the
//     user's buffer, which the proxy hands to the network.
// The FIFO and the blocks are registered with the engine on the
// connection's comm (NetLink::regMr) before their first use.
//
// Threading: take()/fifo() run on the thread that owns the communicator;
// the proxy reads the words and writes `sent` / `arrived`.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/runtime.h"
#include "transport/ctrl_block.h"
#include "transport/net_link.h"

namespace ferry {

// Counters in units of chunks (filled, arrived, consumed) or messages
// (sent), each monotonic over the life of the connection.
struct NetWords {
  CtrlWord filled;    // sender: chunks copied into staging (its copy stream writes)
  CtrlWord sent;      // sender: messages the network took in full (proxy writes)
  CtrlWord arrived;   // receiver: chunks landed in the FIFO (proxy writes)
  CtrlWord consumed;  // receiver: chunks copied out of the FIFO (its copy stream writes)
};

class NetBuffers {
 public:
  NetBuffers(rt::Runtime* runtime, NetLink* link) : runtime_(runtime), link_(link) {}
  ~NetBuffers();
  NetBuffers(const NetBuffers&) = delete;
  NetBuffers& operator=(const NetBuffers&) = delete;

  [[nodiscard]] Status init();  // allocates the words (zeroed)
  NetWords& words() const { return *words_; }

  // Receiver: the FIFO, allocated and registered on first use.
  [[nodiscard]] Status fifo(uint64_t chunkBytes, uint64_t chunks, char** data, void** mhandle);
  // Sender: a registered block of >= bytes, free again once message
  // `seq` is sent (words().sent > seq).
  [[nodiscard]] Status take(uint64_t bytes, uint64_t seq, char** data, void** mhandle);
  uint64_t stagingBytes() const { return stagingBytes_; }

 private:
  struct Region {
    std::unique_ptr<rt::HostMemory> mem;
    void* mhandle = nullptr;
    uint64_t busyUntil = 0;  // free once words().sent >= this
  };
  [[nodiscard]] Status allocate(uint64_t bytes, Region* out);

  rt::Runtime* runtime_;
  NetLink* link_;
  std::unique_ptr<rt::HostMemory> wordMem_;
  NetWords* words_ = nullptr;
  Region fifo_;
  uint64_t fifoBytes_ = 0;
  std::vector<Region> blocks_;
  uint64_t stagingBytes_ = 0;
};

}  // namespace ferry
