#include "coll/p2p_inplace.h"

#include <algorithm>
#include <utility>

#include "algo/ring_schedule.h"
#include "core/log.h"
#include "runtime/device_scope.h"

namespace ferry {
namespace {

constexpr uint64_t kScratchAlign = 256;         // each staged send starts aligned
constexpr uint64_t kMinScratchBytes = 1 << 20;  // grown by doubling from here

using Range = std::pair<uintptr_t, uintptr_t>;  // [begin, end)

// The receives' byte ranges, sorted and merged into disjoint ranges.
std::vector<Range> receiveRanges(const std::vector<P2pTask>& tasks) {
  std::vector<Range> r;
  for (const P2pTask& t : tasks) {
    if (t.isSend || t.bytes == 0) continue;
    const auto b = reinterpret_cast<uintptr_t>(t.buffer);
    r.emplace_back(b, b + t.bytes);
  }
  std::sort(r.begin(), r.end());
  std::vector<Range> merged;
  for (const Range& x : r) {
    if (!merged.empty() && x.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, x.second);
    } else {
      merged.push_back(x);
    }
  }
  return merged;
}

bool hitsAny(const std::vector<Range>& ranges, uintptr_t b, uintptr_t e) {
  // The first range that ends after b; it overlaps iff it starts before e.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), b,
                             [](uintptr_t v, const Range& r) { return v < r.second; });
  return it != ranges.end() && it->first < e;
}

// The sends of `tasks` whose bytes some range of `recvs` overlaps (*which)
// and the scratch they take, each slice aligned.
uint64_t overlappingSends(const std::vector<P2pTask>& tasks, const std::vector<Range>& recvs,
                          std::vector<size_t>* which) {
  uint64_t total = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const P2pTask& t = tasks[i];
    if (!t.isSend || t.bytes == 0) continue;
    const auto b = reinterpret_cast<uintptr_t>(t.buffer);
    if (!hitsAny(recvs, b, b + t.bytes)) continue;
    which->push_back(i);
    total += algo::roundUp(t.bytes, kScratchAlign);
  }
  return total;
}

// Points each send of `which` at its slice of the scratch at `base` and
// appends the copy that fills it (on the send's own stream when
// `ownStream`, else on the launch stream).
void redirect(char* base, const std::vector<size_t>& which, bool ownStream,
              const std::vector<std::shared_ptr<rt::Event>>* waitFirst, std::vector<P2pTask>* tasks,
              std::vector<StagedSend>* copies) {
  uint64_t off = 0;
  for (size_t i : which) {
    P2pTask& t = (*tasks)[i];
    copies->push_back(
        StagedSend{base + off, t.buffer, t.bytes, ownStream ? t.stream : nullptr, waitFirst});
    t.buffer = base + off;
    off += algo::roundUp(t.bytes, kScratchAlign);
  }
}

uint64_t nextPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

Status InPlaceStager::stage(rt::Runtime* runtime, const std::vector<P2pTask>& tasks,
                            std::vector<P2pTask>* out, std::vector<StagedSend>* copies) {
  out->clear();
  copies->clear();
  const std::vector<Range> recvs = receiveRanges(tasks);
  if (recvs.empty()) return ncclSuccess;
  std::vector<size_t> which;
  const uint64_t total = overlappingSends(tasks, recvs, &which);
  if (which.empty()) return ncclSuccess;
  bool capturing = false;
  FERRY_CHECK(runtime->isCapturing(tasks[0].stream, &capturing));
  char* base = nullptr;
  FERRY_CHECK(scratchFor(runtime, total, capturing, &base));
  *out = tasks;
  redirect(base, which, false, nullptr, out, copies);
  FERRY_TRACE(kLogP2p,
              "kernel p2p: %zu send(s) overlap a receive of the same group: %llu bytes "
              "staged first",
              which.size(), static_cast<unsigned long long>(total));
  return ncclSuccess;
}

Status InPlaceStager::scratchFor(rt::Runtime* runtime, uint64_t bytes, bool capturing, char** out) {
  if (capturing || !current_ || current_->size() < bytes) {
    const uint64_t size = capturing ? bytes : std::max(kMinScratchBytes, nextPow2(bytes));
    std::unique_ptr<rt::DeviceMemory> m;
    {
      rt::RelaxedCaptureScope relaxed(runtime);  // allocating is not a stream operation
      FERRY_CHECK(runtime->allocDevice(size, &m));
    }
    if (capturing) {
      *out = static_cast<char*>(m->ptr());
      kept_.push_back(std::move(m));
      return ncclSuccess;
    }
    if (current_) kept_.push_back(std::move(current_));
    current_ = std::move(m);
  }
  *out = static_cast<char*>(current_->ptr());
  return ncclSuccess;
}

Status InPlaceStager::stageAcross(rt::Runtime* runtime, const std::vector<P2pTask>& kernel,
                                  std::vector<P2pTask>* smFree, std::vector<StagedSend>* copies) {
  acrossReaders_.clear();
  const std::vector<Range> recvs = receiveRanges(kernel);
  if (recvs.empty()) return ncclSuccess;
  std::vector<size_t> which;
  const uint64_t total = overlappingSends(*smFree, recvs, &which);
  if (which.empty()) return ncclSuccess;
  if (!across_ || across_->size() < total) {
    std::unique_ptr<rt::DeviceMemory> m;
    FERRY_CHECK(runtime->allocDevice(std::max(kMinScratchBytes, nextPow2(total)), &m));
    // The old buffer may still be read by the last group's sends: kept.
    if (across_) kept_.push_back(std::move(across_));
    across_ = std::move(m);
    readerMarks_.clear();  // nobody has read the new one
  }
  redirect(static_cast<char*>(across_->ptr()), which, true, &readerMarks_, smFree, copies);
  for (size_t i : which) {
    void* stream = (*smFree)[i].stream;
    if (std::find(acrossReaders_.begin(), acrossReaders_.end(), stream) == acrossReaders_.end()) {
      acrossReaders_.push_back(stream);
    }
  }
  FERRY_TRACE(kLogP2p,
              "p2p: %zu SM-free send(s) overlap a kernel p2p receive of the same group: %llu "
              "bytes copied aside before the kernel",
              which.size(), static_cast<unsigned long long>(total));
  return ncclSuccess;
}

Status InPlaceStager::readersDone(rt::Runtime* runtime) {
  if (acrossReaders_.empty()) return ncclSuccess;
  // Each reader stream passes the group only once its sends have read the
  // scratch (their user-stream waits, or a detached send's staging copy,
  // are on it): an event there, now, marks that point.
  std::vector<std::shared_ptr<rt::Event>> marks;
  for (void* handle : acrossReaders_) {
    std::unique_ptr<rt::Stream> s;
    FERRY_CHECK(runtime->wrapUserStream(handle, &s));
    std::unique_ptr<rt::Event> e;
    FERRY_CHECK(runtime->createEvent(&e));
    FERRY_CHECK(e->record(*s));
    marks.push_back(std::move(e));
  }
  readerMarks_ = std::move(marks);
  acrossReaders_.clear();
  return ncclSuccess;
}

uint64_t InPlaceStager::bytesHeld() const {
  uint64_t n = (current_ ? current_->size() : 0) + (across_ ? across_->size() : 0);
  for (const auto& m : kept_) n += m->size();
  return n;
}

}  // namespace ferry
