// User-visible streams by handle, for the ncclFerryStream* functions of
// include/ferry.h (and any code that receives a stream handle from a user).
//
// A stream created here is owned by a process-wide registry keyed by its
// native handle (the cudaStream_t the user sees) until userStreamDestroy.
// Handles not created here are still accepted by userStreamSynchronize when
// the runtime can wrap them (CUDA: any cudaStream_t; host: NULL only, plus
// streams created by the host runtime elsewhere).
//
// Threading: all functions are thread-safe. Destroying a stream while another
// thread still enqueues to it is a user error (as with cudaStreamDestroy); a
// synchronize running concurrently with the destroy stays memory-safe.
#pragma once

#include "runtime/runtime.h"

namespace ferry::rt {

// The runtime FERRY_RUNTIME selects now (selectRuntime on a fresh snapshot).
[[nodiscard]] Status selectedRuntime(Runtime** out);

// Creates a stream of `runtime` (or of the selected runtime) and returns its
// handle; it stays alive until userStreamDestroy(handle).
[[nodiscard]] Status userStreamCreate(Runtime& runtime, void** handle);
[[nodiscard]] Status userStreamCreate(void** handle);

// Waits for all work on `handle`: a registered stream, or one the selected
// runtime can wrap (NULL = synchronous/default stream).
[[nodiscard]] Status userStreamSynchronize(void* handle);

// Destroys a stream made by userStreamCreate (draining it first on the host
// runtime). ncclInvalidArgument for any other handle.
[[nodiscard]] Status userStreamDestroy(void* handle);

}  // namespace ferry::rt
