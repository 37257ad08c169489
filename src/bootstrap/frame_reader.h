// Incremental reader of bootstrap frames (wire.h) from a non-blocking socket.
//
// A poll loop calls pump() whenever the socket is readable; the reader keeps
// the partial header/payload between calls, so a slow or silent sender never
// blocks the loop. It reads exactly the bytes of the current frame, never
// beyond, so a caller may hand the socket to another reader after a frame.
//
// Threading: owned by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace ferry::boot {

class FrameReader {
 public:
  enum class Result {
    kNeedMore,  // nothing complete yet; poll again
    kFrame,     // header() and payload() hold a whole frame; call next() before pumping
    kClosed,    // the peer closed; midFrame() tells whether it cut a frame short
    kBad,       // malformed input or a socket error; reason in *why
  };

  FrameReader(uint64_t magic, uint64_t maxPayload) : magic_(magic), maxPayload_(maxPayload) {}

  Result pump(const Socket& sock, std::string* why);
  const FrameHeader& header() const { return header_; }
  std::vector<uint8_t>& payload() { return payload_; }
  // Starts the next frame.
  void next();
  bool midFrame() const { return headerGot_ > 0; }
  void setMaxPayload(uint64_t maxPayload) { maxPayload_ = maxPayload; }

 private:
  uint64_t magic_;
  uint64_t maxPayload_;
  uint8_t headerBytes_[kFrameHeaderBytes] = {};
  size_t headerGot_ = 0;
  bool headerDone_ = false;
  FrameHeader header_;
  std::vector<uint8_t> payload_;
  size_t payloadGot_ = 0;
};

}  // namespace ferry::boot
