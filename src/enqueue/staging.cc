#include "enqueue/staging.h"

#include <algorithm>
#include <cstring>

#include "enqueue/rendezvous.h"

namespace ferry {

struct StagingPool::Block {
  std::unique_ptr<rt::DeviceMemory> device;            // device blocks
  std::unique_ptr<SharedRegion> shared;                // host blocks
  std::unique_ptr<rt::HostRegistration> registration;  // host blocks
  char* ptr = nullptr;                                 // what this process's copies use
  uint64_t size = 0;
  uint64_t key = 0;  // RPC resource key (host blocks)
  // In use until: (ctrl, seq) is done, or `event` completes; neither: free.
  bool busy = false;
  CtrlBlock* ctrl = nullptr;
  uint64_t seq = 0;
  std::shared_ptr<rt::Event> event;
};

StagingPool::StagingPool(rt::Runtime* runtime, bool hostShared, RpcServer* rpc, uint64_t commKey)
    : runtime_(runtime), hostShared_(hostShared), rpc_(rpc), commKey_(commKey) {}

StagingPool::~StagingPool() {
  clear();
}

char* StagingPool::data(const Block* b) {
  return b->ptr;
}

void StagingPool::reclaim() {
  for (auto& b : blocks_) {
    if (!b->busy) continue;
    // Acquire (messageDone, Event::query): the copies that used the block
    // finished before the flag was written or the event completed.
    bool free = b->ctrl != nullptr ? messageDone(*b->ctrl, b->seq)
                                   : (b->event && b->event->query() == ncclSuccess);
    if (free) {
      b->busy = false;
      b->ctrl = nullptr;
      b->event.reset();
    }
  }
}

uint64_t StagingPool::blockSize(uint64_t bytes) {
  // Whole 2 MiB multiples: CUDA offers legacy IPC handles only for
  // allocations that own their 2 MiB chunks (NOTES.md trap 9). Powers of
  // two up to kStep (sizes recur, so blocks get reused), then multiples of
  // kStep: a staged 2 GiB + 4 KiB message must not take 4 GiB.
  constexpr uint64_t kChunk = uint64_t{2} << 20, kStep = uint64_t{64} << 20;
  uint64_t size = kChunk;
  while (size < bytes && size < kStep) size <<= 1;
  if (size < bytes) size = (bytes + kStep - 1) / kStep * kStep;
  return size;
}

Status StagingPool::grow(uint64_t bytes, Block** out) {
  const uint64_t size = blockSize(bytes);
  auto b = std::make_unique<Block>();
  b->size = size;
  if (hostShared_) {
    FERRY_CHECK(SharedRegion::create(size, "ferry-stage", &b->shared));
    FERRY_CHECK(runtime_->registerHost(b->shared->data(), b->shared->size(), &b->registration));
    b->ptr = static_cast<char*>(b->registration->devicePtr());
    b->key = stagingResourceKey(nextKey_++);
    FERRY_CHECK(rpc_->addResource(commKey_, b->key, b->shared->fd(), b->shared->size()));
  } else {
    FERRY_CHECK(runtime_->allocDevice(size, &b->device));
    b->ptr = static_cast<char*>(b->device->ptr());
  }
  totalBytes_ += size;
  FERRY_INFO(kLogP2p | kLogAlloc, "staging grew by %llu bytes to %llu (%s)",
             static_cast<unsigned long long>(size), static_cast<unsigned long long>(totalBytes_),
             hostShared_ ? "host shared memory, SHM connections" : "device memory");
  blocks_.push_back(std::move(b));
  *out = blocks_.back().get();
  return ncclSuccess;
}

Status StagingPool::describe(const Block& b, PostInfo* info) {
  memset(info, 0, sizeof(*info));
  info->allocSize = b.size;
  info->offset = 0;
  info->localPtr = reinterpret_cast<uint64_t>(b.ptr);
  info->staged = 1;
  if (hostShared_) {
    info->kind = static_cast<uint32_t>(PostKind::Resource);
    info->allocId = b.key;
    return ncclSuccess;
  }
  rt::AllocationInfo a;
  FERRY_CHECK(runtime_->describeAllocation(b.ptr, b.size, &a));
  if (!a.mappable) {
    FERRY_FAIL(ncclInternalError, "staging block %p (%llu bytes) cannot be shared with peers",
               static_cast<void*>(b.ptr), static_cast<unsigned long long>(b.size));
  }
  postIpc(a, b.ptr, info);
  return ncclSuccess;
}

bool StagingPool::hasFree(uint64_t bytes) {
  reclaim();
  for (auto& b : blocks_) {
    if (!b->busy && b->size >= bytes) return true;
  }
  return false;
}

Status StagingPool::take(uint64_t bytes, Block** out, PostInfo* info) {
  reclaim();
  Block* best = nullptr;
  for (auto& b : blocks_) {
    if (!b->busy && b->size >= bytes && (best == nullptr || b->size < best->size)) best = b.get();
  }
  if (best == nullptr) FERRY_CHECK(grow(bytes, &best));
  FERRY_CHECK(describe(*best, info));
  info->bytes = bytes;
  best->busy = true;
  *out = best;
  return ncclSuccess;
}

void StagingPool::releaseWhenDone(Block* b, CtrlBlock* ctrl, uint64_t seq) {
  b->ctrl = ctrl;
  b->seq = seq;
  b->event.reset();
}

void StagingPool::releaseAfter(Block* b, std::shared_ptr<rt::Event> event) {
  b->ctrl = nullptr;
  b->event = std::move(event);
}

void StagingPool::release(Block* b) {
  b->busy = false;
  b->ctrl = nullptr;
  b->event.reset();
}

void StagingPool::clear() {
  for (auto& b : blocks_) {
    if (b->shared) rpc_->removeResource(commKey_, b->key);
  }
  blocks_.clear();
  totalBytes_ = 0;
}

}  // namespace ferry
