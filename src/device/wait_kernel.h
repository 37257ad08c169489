// The one-thread wait kernel behind Stream::waitValue64Spin (runtime.h). For
// .cu files only; C++ code reaches it through kernels.h.
#pragma once

#include <cstdint>

namespace ferry::device {

// Returns once (int64_t)(*word - target) >= 0 (the cyclic >= of
// cuStreamWaitValue64's GEQ), polling with system-scope acquire loads and
// __nanosleep naps that grow to about 1 us.
//
// Ordering: the acquire load pairs with the releasing write of `word` -- a
// CPU release store, or cuStreamWriteValue64 with its default memory barrier
// after a copy -- so whatever was written before the word is visible to this
// thread; the kernel's completion then orders it before every later operation
// on the stream (kernels, copies), which is what readers of that data rely on.
//
// `word` may be device memory (any GPU, peer-mapped) or mapped pinned host
// memory. After `timeoutNs` (0: never) without the condition, prints a line
// and traps: the stream and the context fail loudly rather than hang.
// Launch with exactly one block of one thread.
__global__ void ferryWaitGeqKernel(const volatile uint64_t* word, uint64_t target,
                                   uint64_t timeoutNs);

}  // namespace ferry::device
