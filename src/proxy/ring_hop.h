// A ring hop between hosts (issue 18): the proxy carries one channel of a
// collective ring across the network, so the ring kernels (algo/coll_ring.h)
// run unchanged. The kernel on each side sees the FIFO protocol it knows:
//
//   sender (next rank remote): the kernel fills a local mirror FIFO and
//     publishes its tail in a mirror word (`kernelWord`, monotonic step
//     count); the proxy isends each filled slot whole, in step order, and
//     publishes how many isends completed as the kernel's sendHead
//     (`proxyWord`): a slot may be refilled once the engine is done with it.
//     Only the bytes the kernel put in the slot travel (`sizes`, which the
//     kernel writes before its tail): a small collective moves its bytes,
//     not nslots x slotBytes.
//   receiver (previous rank remote): the proxy keeps irecvs posted (of a
//     whole slot; a step may carry less) into the
//     rank's own FIFO slots that the kernel has drained (its recvHead acks
//     land in a mirror word, `kernelWord`), and publishes how many slots
//     arrived as the kernel's recvTail (`proxyWord`).
// Back-pressure needs no credit messages: a receiver posts a slot only once
// the kernel drained it, and the sender's slots free as its isends finish.
// Counters never reset (like the kernels' step counters), so the hops are
// persistent: they work for every launch and for CUDA-graph replays alike.
// The LL protocol crosses hosts too (algo/coll_ll.h): its sending kernel
// notes each step's line bytes and posts a tail like the FIFO protocol's,
// so the send hop is the same; a receive hop lands the lines in `landing`
// and copies them into the FIFO slot with one 8-byte store per word, so
// that the kernel, which polls each word's flag, never sees a torn word (a
// network engine's receive may write a word's bytes in any order). It
// publishes no tail (`proxyWord` null): the flags are the readiness.
//
// Memory ordering: kernelWord is read with acquire (the kernel's post is a
// release after its slot stores/loads); proxyWord is written with release
// after the engine reported the slot's bytes moved.
//
// Threading: set up by the communicator's init thread, then stepped by the
// proxy thread only (Proxy::addRingHops / removeRingHops).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "transport/net_link.h"

namespace ferry {

struct RingHop {
  bool isSend = false;
  int peer = -1;     // the rank on the other host
  int channel = -1;  // ring channel
  // LL receive: nslots x slotBytes where the engine lands the lines (the
  // registered buffer); null otherwise. Freed after the link (declared
  // before it), whose engine connection may still write into it.
  std::unique_ptr<uint64_t[]> landing;
  std::unique_ptr<NetLink> link;
  void* mhandle = nullptr;  // the FIFO's registration with the engine
  char* fifo = nullptr;     // CPU address of the channel's FIFO (mirror or own)
  uint64_t slotBytes = 0;
  uint32_t nslots = 0;
  uint64_t* proxyWord = nullptr;         // send: sendHead; receive: recvTail (LL: null)
  const uint64_t* kernelWord = nullptr;  // send: filled tail; receive: drained head
  // Send: the bytes the kernel put in each slot (by step % nslots, written
  // before its tail); null: ship whole slots.
  const uint64_t* sizes = nullptr;
  // Proxy-thread state.
  uint64_t posted = 0;
  uint64_t done = 0;
  std::deque<void*> requests;
  bool failed = false;

  // One pass: completes finished requests, posts what is ready. *moved when
  // anything happened. An engine error fails the hop (returned once).
  [[nodiscard]] Status step(bool* moved);
  // A send hop has delivered every slot its kernel filled (or stopped).
  bool flushed() const;
  std::string describe() const;

 private:
  [[nodiscard]] Status stop(Status s, const char* what);
  uint64_t sendBytes(uint64_t k) const;
  void landLines(uint64_t k, size_t bytes) const;
};

}  // namespace ferry
