// Unix-domain socket helpers: local control channels between processes of one
// host (runtime IPC tests now, the proxy's RPC channel later), including
// passing file descriptors (memfds, cuMem export fds) by SCM_RIGHTS.
//
// Sockets are SOCK_SEQPACKET: every send is one message and a receive returns
// exactly one whole message, so framing needs no length prefix. A message must
// carry at least one byte (a zero-byte read means "peer closed"). A message
// larger than the receiver's buffer, or with more descriptors than it accepts,
// is an error (never silently cut short); descriptors of a rejected message
// are closed.
//
// Waits: every call that may block takes `timeoutMs` (>= 0; 0 = try once) for
// the whole operation and an optional `abortFlag`; the flag is read (acquire)
// at least every kUnixPollSliceMs while waiting, and a set flag ends the call.
// EINTR is retried transparently.
//
// Errors: ncclSystemError for local failures, timeouts and aborts (with a WARN,
// except for aborts, which are logged at INFO since someone asked for them);
// ncclRemoteError when the peer closed or sent a message we cannot accept;
// ncclInvalidArgument for bad arguments.
//
// Names are Linux abstract-namespace names (no file is created, nothing to
// clean up; the name disappears with the last socket bound to it).
//
// Threading: the functions are reentrant; one socket must not be read (or
// written) from two threads at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/fd.h"
#include "core/status.h"

namespace ferry {

// The most descriptors one message may carry.
inline constexpr int kUnixMaxFds = 16;
// Abstract names are limited by sockaddr_un (107 bytes after the leading NUL).
inline constexpr size_t kUnixMaxNameLength = 100;
// How often a blocked call re-checks its abort flag.
inline constexpr int kUnixPollSliceMs = 20;

// A connected pair of SOCK_SEQPACKET sockets (close-on-exec), e.g. for fork.
[[nodiscard]] Status unixSocketPair(UniqueFd* a, UniqueFd* b);

// Binds a listening socket to abstract name `name` (without the leading NUL).
// Fails with ncclSystemError when the name is taken.
[[nodiscard]] Status unixListen(const std::string& name, UniqueFd* out);

// Accepts one connection on a listening socket.
[[nodiscard]] Status unixAccept(int listenFd, UniqueFd* out, int64_t timeoutMs,
                                const std::atomic<bool>* abortFlag = nullptr);

// Connects to abstract name `name`, retrying while nobody listens there yet
// (the peer may still be starting) until the timeout.
[[nodiscard]] Status unixConnect(const std::string& name, UniqueFd* out, int64_t timeoutMs,
                                 const std::atomic<bool>* abortFlag = nullptr);

// Sends one message of `bytes` (>= 1) bytes with `numFds` descriptors (0 ..
// kUnixMaxFds). The descriptors stay owned by the caller (the peer gets dups).
[[nodiscard]] Status unixSendMsg(int fd, const void* data, size_t bytes, const int* fds, int numFds,
                                 int64_t timeoutMs, const std::atomic<bool>* abortFlag = nullptr);

// Receives one message into `data` (capacity bytes). `*received` gets its size;
// received descriptors go to fds[0 .. *numFds) (fds may be null when maxFds is
// 0; then a message with descriptors is an error).
[[nodiscard]] Status unixRecvMsg(int fd, void* data, size_t capacity, size_t* received,
                                 UniqueFd* fds, int maxFds, int* numFds, int64_t timeoutMs,
                                 const std::atomic<bool>* abortFlag = nullptr);

// Convenience: receives a message that must be exactly `bytes` long.
[[nodiscard]] Status unixRecvExact(int fd, void* data, size_t bytes, UniqueFd* fds, int maxFds,
                                   int* numFds, int64_t timeoutMs,
                                   const std::atomic<bool>* abortFlag = nullptr);

}  // namespace ferry
