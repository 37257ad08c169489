#include "transport/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry {
namespace {

size_t roundToPages(size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) munmap(data_, size_);
}

Status SharedRegion::create(size_t bytes, const char* name, std::unique_ptr<SharedRegion>* out) {
  size_t size = roundToPages(bytes);
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC));
  if (!fd) FERRY_FAIL(ncclSystemError, "memfd_create(%s) failed: %s", name, strerror(errno));
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    FERRY_FAIL(ncclSystemError, "ftruncate of shared region (%zu bytes) failed: %s", size,
               strerror(errno));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED)
    FERRY_FAIL(ncclSystemError, "mmap of %zu bytes failed: %s", size, strerror(errno));
  out->reset(new SharedRegion(std::move(fd), p, size));
  return ncclSuccess;
}

Status SharedRegion::attach(UniqueFd fd, size_t bytes, std::unique_ptr<SharedRegion>* out) {
  size_t size = roundToPages(bytes);
  off_t actual = lseek(fd.get(), 0, SEEK_END);
  if (actual < 0 || static_cast<size_t>(actual) < size) {
    FERRY_FAIL(ncclRemoteError, "shared region is %lld bytes, expected at least %zu",
               static_cast<long long>(actual), size);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED)
    FERRY_FAIL(ncclSystemError, "mmap of %zu bytes failed: %s", size, strerror(errno));
  out->reset(new SharedRegion(std::move(fd), p, size));
  return ncclSuccess;
}

}  // namespace ferry
