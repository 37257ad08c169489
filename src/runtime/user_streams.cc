#include "runtime/user_streams.h"

#include <map>
#include <mutex>

#include "core/params.h"

namespace ferry::rt {
namespace {

// Handle -> stream. shared_ptr so a synchronize can run outside the lock while
// a destroy removes the entry. Never destroyed (used until process exit).
struct UserStreams {
  std::mutex mutex;
  std::map<void*, std::shared_ptr<Stream>> streams;
};

UserStreams& userStreams() {
  static UserStreams* instance = new UserStreams();
  return *instance;
}

std::shared_ptr<Stream> findStream(void* handle) {
  std::lock_guard<std::mutex> lock(userStreams().mutex);
  auto it = userStreams().streams.find(handle);
  return it == userStreams().streams.end() ? nullptr : it->second;
}

}  // namespace

Status selectedRuntime(Runtime** out) {
  return selectRuntime(Params::load().getString(ParamId::Runtime), out);
}

Status userStreamCreate(Runtime& runtime, void** handle) {
  if (handle == nullptr) FERRY_FAIL(ncclInvalidArgument, "stream create: null handle pointer");
  std::unique_ptr<Stream> stream;
  FERRY_CHECK(runtime.createStream(&stream));
  void* h = stream->nativeHandle();
  {
    std::lock_guard<std::mutex> lock(userStreams().mutex);
    userStreams().streams[h] = std::move(stream);
  }
  *handle = h;
  return ncclSuccess;
}

Status userStreamCreate(void** handle) {
  Runtime* runtime = nullptr;
  FERRY_CHECK(selectedRuntime(&runtime));
  return userStreamCreate(*runtime, handle);
}

Status userStreamSynchronize(void* handle) {
  if (std::shared_ptr<Stream> stream = findStream(handle)) return stream->synchronize();
  Runtime* runtime = nullptr;
  FERRY_CHECK(selectedRuntime(&runtime));
  std::unique_ptr<Stream> wrapped;
  FERRY_CHECK(runtime->wrapUserStream(handle, &wrapped));
  return wrapped->synchronize();
}

Status userStreamDestroy(void* handle) {
  std::shared_ptr<Stream> stream;
  {
    std::lock_guard<std::mutex> lock(userStreams().mutex);
    auto it = userStreams().streams.find(handle);
    if (it == userStreams().streams.end()) {
      FERRY_FAIL(ncclInvalidArgument, "stream destroy: %p was not created by ncclFerryStreamCreate",
                 handle);
    }
    stream = std::move(it->second);
    userStreams().streams.erase(it);
  }
  // Released outside the lock: a host stream drains its work here.
  stream.reset();
  return ncclSuccess;
}

}  // namespace ferry::rt
