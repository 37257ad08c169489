// ncclCommWindowRegister / ncclCommWindowDeregister (comm/windows.h says
// what a window is and buys). Registration is collective: inside a group
// it runs at ncclGroupEnd (with the other communicators' registrations, so
// one thread may register a window on each of several ranks), and *win is
// filled then, as NCCL documents.
#include "api/api.h"
#include "comm/group.h"
#include "runtime/device_scope.h"

using namespace ferry;

namespace {

Status registerNow(Communicator* c, void* buff, size_t size, ncclWindow_t* win, int flags) {
  LogRankScope scope(c->rank());
  rt::DeviceScope device(c->runtime(), c->device());
  FERRY_CHECK(device.status());
  Window* w = nullptr;
  FERRY_CHECK(c->windows().add(buff, size, flags, &w));
  *win = reinterpret_cast<ncclWindow_t>(w);
  return ncclSuccess;
}

}  // namespace

extern "C" FERRY_VISIBLE ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff,
                                                             size_t size, ncclWindow_t* win,
                                                             int winFlags) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(readyComm(comm, __func__, &c));
    if (win == nullptr) FERRY_FAIL(ncclInvalidArgument, "%s: win is NULL", __func__);
    *win = nullptr;
    // Bad buff/size/flags are checked inside, collectively: every rank
    // learns that some rank's arguments were bad.
    if (groupDepth() == 0) return registerNow(c, buff, size, win, winFlags);
    GroupJob job;
    job.comm = c;
    job.blocking = true;
    job.run = [c, buff, size, win, winFlags]() {
      return registerNow(c, buff, size, win, winFlags);
    };
    return groupSubmit(std::move(job));
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommWindowRegister,
                  (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))

extern "C" FERRY_VISIBLE ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return apiGuard(__func__, [&]() -> Status {
    Communicator* c = nullptr;
    FERRY_CHECK(commFromHandle(comm, __func__, &c));
    return c->windows().remove(reinterpret_cast<Window*>(win));
  });
}
FERRY_PNCCL_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
