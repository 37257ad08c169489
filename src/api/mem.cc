// Memory for zero-copy (ncclMemAlloc/ncclMemFree) and buffer registration
// (ncclCommRegister/ncclCommDeregister).
//
// ncclMemAlloc returns memory another process can map: cudaMalloc memory on
// CUDA (legacy IPC), memfd-backed memory on the host runtime. SM-free
// receives into it are zero-copy (one copy per byte). Registration validates
// the range and keeps a handle; whether a receive is zero-copy is decided per
// message from the allocation itself, so an unregistered buffer works the
// same way and a registration mismatch can never hang anything.
#include <map>
#include <mutex>

#include "api/api.h"
#include "runtime/user_streams.h"

using namespace ferry;

namespace {

struct MemRegistry {
  std::mutex mu;
  std::map<void*, std::unique_ptr<rt::DeviceMemory>> allocations;
};
MemRegistry& memRegistry() {
  static MemRegistry* r = new MemRegistry();  // leaked: usable during exit
  return *r;
}

struct Registration {
  uint64_t magic = 0x4665727279526567ULL;  // "FerryReg"
  const Communicator* comm = nullptr;
  void* buffer = nullptr;
  size_t size = 0;
};

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return apiGuard(__func__, [&]() -> Status {
    if (ptr == nullptr) FERRY_FAIL(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    if (size == 0) FERRY_FAIL(ncclInvalidArgument, "ncclMemAlloc: size is 0");
    rt::Runtime* r = nullptr;
    FERRY_CHECK(rt::selectedRuntime(&r));
    // On CUDA, whole 2 MiB chunks: only allocations that own their driver
    // chunks can be mapped by peers for zero-copy (cuda_sm_free.cc).
    if (r->kind() == rt::RuntimeKind::Cuda)
      size = (size + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
    std::unique_ptr<rt::DeviceMemory> mem;
    FERRY_CHECK(r->allocDevice(size, &mem));
    *ptr = mem->ptr();
    std::lock_guard<std::mutex> lock(memRegistry().mu);
    memRegistry().allocations[mem->ptr()] = std::move(mem);
    return ncclSuccess;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

extern "C" FERRY_VISIBLE ncclResult_t ncclMemFree(void* ptr) {
  return apiGuard(__func__, [&]() -> Status {
    if (ptr == nullptr) return ncclSuccess;
    std::unique_ptr<rt::DeviceMemory> mem;
    {
      std::lock_guard<std::mutex> lock(memRegistry().mu);
      auto it = memRegistry().allocations.find(ptr);
      if (it == memRegistry().allocations.end()) {
        FERRY_FAIL(ncclInvalidArgument, "ncclMemFree: %p was not returned by ncclMemAlloc", ptr);
      }
      mem = std::move(it->second);
      memRegistry().allocations.erase(it);
    }
    return ncclSuccess;  // freed here, outside the lock
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclMemFree, (void* ptr))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff,
                                                       size_t size, void** handle) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (buff == nullptr || handle == nullptr || size == 0) {
      FERRY_FAIL(ncclInvalidArgument, "ncclCommRegister: buff, size and handle must be set");
    }
    bool ok = false;
    FERRY_CHECK(c->runtime()->checkUserBuffer(buff, size, &ok));
    if (!ok) FERRY_FAIL(ncclInvalidArgument, "ncclCommRegister: %p is not device-accessible", buff);
    auto* reg = new Registration();
    reg->comm = c;
    reg->buffer = buff;
    reg->size = size;
    *handle = reg;
    return ncclSuccess;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommRegister,
                  (const ncclComm_t comm, void* buff, size_t size, void** handle))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(commFromHandle(comm, __func__, &c));
    auto* reg = static_cast<Registration*>(handle);
    if (reg == nullptr || reg->magic != Registration{}.magic || reg->comm != c) {
      FERRY_FAIL(ncclInvalidArgument,
                 "ncclCommDeregister: %p is not a registration of this "
                 "communicator",
                 handle);
    }
    reg->magic = 0;
    delete reg;
    return ncclSuccess;
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))
