#include "bootstrap/frame_reader.h"

namespace ferry::boot {

void FrameReader::next() {
  headerGot_ = 0;
  headerDone_ = false;
  payload_.clear();
  payloadGot_ = 0;
}

FrameReader::Result FrameReader::pump(const Socket& sock, std::string* why) {
  for (;;) {
    uint8_t* dst;
    size_t want;
    if (!headerDone_) {
      dst = headerBytes_ + headerGot_;
      want = kFrameHeaderBytes - headerGot_;
    } else {
      if (payloadGot_ == payload_.size()) return Result::kFrame;
      dst = payload_.data() + payloadGot_;
      want = payload_.size() - payloadGot_;
    }
    size_t got = 0;
    bool closed = false;
    if (sock.recvSome(dst, want, &got, &closed) != ncclSuccess) {
      *why = "socket error";
      return Result::kBad;
    }
    if (closed) return Result::kClosed;
    if (got == 0) return Result::kNeedMore;
    if (headerDone_) {
      payloadGot_ += got;
      continue;
    }
    headerGot_ += got;
    if (headerGot_ < kFrameHeaderBytes) continue;
    if (decodeFrameHeader(headerBytes_, kFrameHeaderBytes, magic_, &header_, why) != ncclSuccess) {
      return Result::kBad;
    }
    if (header_.payloadLength > maxPayload_) {
      *why = "payload longer than allowed here";
      return Result::kBad;
    }
    headerDone_ = true;
    payload_.resize(header_.payloadLength);
    payloadGot_ = 0;
  }
}

}  // namespace ferry::boot
