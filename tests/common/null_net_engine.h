// A network engine for unit tests that exercise connection set-up or device
// choice only: every call of the data path (registration, isend, irecv,
// flush, test) fails with ncclInternalError, so a test that reaches one by
// mistake fails loudly; one device, no listen/connect/accept, closes
// succeed. Tests override what they script.
#pragma once

#include "net/net.h"

namespace ferry {

class NullNetEngine : public net::NetEngine {
 public:
  const char* name() const override { return "Null"; }
  Status devices(int* count) override {
    *count = 1;
    return ncclSuccess;
  }
  Status properties(int, net::NetProperties* out) override {
    out->name = "null0";
    return ncclSuccess;
  }
  Status listen(int, void*, void**) override { return ncclInternalError; }
  Status connect(int, void*, void**) override { return ncclInternalError; }
  Status accept(void*, void**) override { return ncclInternalError; }
  Status regMr(void*, void*, size_t, int, void**) override { return ncclInternalError; }
  Status deregMr(void*, void*) override { return ncclInternalError; }
  Status isend(void*, void*, size_t, int, void*, void**) override { return ncclInternalError; }
  Status irecv(void*, int, void**, size_t*, int*, void**, void**) override {
    return ncclInternalError;
  }
  Status iflush(void*, int, void**, int*, void**, void**) override { return ncclInternalError; }
  Status test(void*, int*, size_t*) override { return ncclInternalError; }
  Status closeSend(void*) override { return ncclSuccess; }
  Status closeRecv(void*) override { return ncclSuccess; }
  Status closeListen(void*) override { return ncclSuccess; }
};

}  // namespace ferry
