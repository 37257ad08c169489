#include "enqueue/staging.h"

#include <algorithm>

namespace ferry {

uint64_t stagePieceBytes(uint64_t bytes, uint64_t minPiece) {
  constexpr uint64_t kAlign = uint64_t{64} << 10;
  uint64_t piece = (bytes + kMaxStagePieces - 1) / kMaxStagePieces;
  piece = (piece + kAlign - 1) / kAlign * kAlign;
  piece = std::max(piece, minPiece);
  return std::max<uint64_t>(std::min(piece, bytes), 1);
}

void StagingPool::reclaim() {
  for (Block& b : blocks_) {
    // Acquire: the copy out of the block finished before sendDone was written.
    if (b.conn != nullptr && b.conn->ctrl.ctrl->sendDone.load() > b.seq) b.conn = nullptr;
  }
}

Status StagingPool::take(uint64_t bytes, SendConnection* conn, uint64_t seq, void** out) {
  reclaim();
  Block* best = nullptr;
  for (Block& b : blocks_) {
    if (b.conn == nullptr && b.memory->size() >= bytes &&
        (best == nullptr || b.memory->size() < best->memory->size())) {
      best = &b;
    }
  }
  if (best == nullptr) {
    // Round up to a power of two (at least 1 MiB) so sizes recur and blocks are reused.
    uint64_t size = uint64_t{1} << 20;
    while (size < bytes) size <<= 1;
    Block b;
    FERRY_CHECK(runtime_->allocDevice(size, &b.memory));
    totalBytes_ += size;
    FERRY_INFO(kLogP2p | kLogAlloc, "staging grew by %llu bytes to %llu (staged sends)",
               static_cast<unsigned long long>(size), static_cast<unsigned long long>(totalBytes_));
    blocks_.push_back(std::move(b));
    best = &blocks_.back();
  }
  best->conn = conn;
  best->seq = seq;
  *out = best->memory->ptr();
  return ncclSuccess;
}

void StagingPool::clear() {
  blocks_.clear();
  totalBytes_ = 0;
}

}  // namespace ferry
