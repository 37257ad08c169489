#include "transport/net_block_pool.h"

namespace ferry {

Status NetBlockPool::pin(uint64_t bytes, Block** out) {
  auto b = std::make_unique<Block>();
  FERRY_CHECK(runtime_->allocHost(bytes, &b->mem));
  bytes_ += bytes;
  blocks_.push_back(std::move(b));
  *out = blocks_.back().get();
  return ncclSuccess;
}

void NetBlockPool::release(const NetBuffers* user) {
  for (auto& b : blocks_) {
    if (b->user != user) continue;
    b->user = nullptr;
    b->busyUntil = 0;
  }
}

}  // namespace ferry
