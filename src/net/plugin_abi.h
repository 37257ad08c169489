// The binary interface of NCCL's external network plugins, as NCCL 2.28
// loads them: a shared library exports one data symbol, ncclNetPlugin_vN,
// a table of C function pointers whose layout is fixed per version N.
//
// Ferry understands N = 6 .. 11 (the range NCCL 2.28 accepts) and looks for
// the newest first. Everything here is laid out member for member as the
// plugins were compiled (same types, same order), so a table can be read
// straight out of the library; the static_asserts at the end pin the sizes
// and a few offsets for LP64 targets. Nothing in this file is Ferry policy:
// net/plugin.cc adapts these tables to net/net.h.
//
// The type and member names are NCCL's own so that a reader can put a
// plugin's source next to this file; they live in ferry::net::abi so that
// they never collide with anything a program includes. Plugins themselves
// are C: none of these functions may throw, and Ferry's callbacks given to
// them (logger, profiler) must not throw either.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

namespace ferry::net::abi {

// ---- constants shared by every version --------------------------------------

// Bytes of the opaque listen handle a plugin fills and its peer reads.
constexpr int NCCL_NET_HANDLE_MAXSIZE = 128;

// ptrSupport bits and the `type` argument of regMr.
constexpr int NCCL_PTR_HOST = 0x1;
constexpr int NCCL_PTR_CUDA = 0x2;
constexpr int NCCL_PTR_DMABUF = 0x4;

// Outstanding requests a comm must be able to hold (v6 plugins were written
// for the older, smaller figure).
constexpr int NCCL_NET_MAX_REQUESTS_V6 = 8;
constexpr int NCCL_NET_MAX_REQUESTS = 32;

// Devices one virtual NIC (v9+ makeVDevice / vProps) may merge.
constexpr int NCCL_NET_MAX_DEVS_PER_NIC = 4;

// Transfer ceilings NCCL assumes for plugins that cannot report their own
// (before v9 sizes were `int`): 1 GiB per p2p message, 512 MiB per
// collective-network operation. v9+ plugins report maxP2pBytes and
// maxCollBytes, which NCCL accepts up to 1 TiB.
constexpr size_t kLegacyMaxP2pBytes = size_t{1} << 30;
constexpr size_t kLegacyMaxCollBytes = size_t{512} << 20;
constexpr size_t kMaxNetSizeBytes = size_t{1} << 40;

// Values NCCL may pass *in* through irecv's request argument (v9+ plugins
// may look at it): a hint, not a pointer. Callers that give no hint must
// pass a null *request.
constexpr uintptr_t NCCL_NET_OPTIONAL_RECV_COMPLETION = 0x1;
constexpr uintptr_t NCCL_NET_MULTI_REQUEST = 0x2;

// ---- logging and profiling callbacks ----------------------------------------

// Levels of the logger callback. Note the order: ABORT sits between INFO and
// TRACE, unlike Ferry's own LogLevel.
enum ncclDebugLogLevel {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
};

// Subsystem bits of the logger's `flags` argument; bit for bit the same as
// Ferry's LogSubsys (core/log.h), so flags pass through unchanged.
enum ncclDebugLogSubSys : unsigned long {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
};

// The host's logger as a plugin sees it: printf-style, with the plugin's own
// source location.
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

// Event kinds a v10+ plugin reports through the profiler callback.
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3,
};

// The host's profiler hook (v10+): the plugin opens, updates and closes
// events; *eHandle is the host's event handle (null: not recorded). pHandle
// is the per-operation handle the host passed to isend/irecv.
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

// ---- device offload (v7+) ---------------------------------------------------

// How received data reaches the GPU. HOST: the plugin writes it itself.
// UNPACK (GCP TCPX/FastRak): the GPU must run NCCL's unpack kernel on the
// plugin's staging pages, which Ferry does not have. The GIN kinds belong to
// NCCL's GPU-initiated networking, not to this interface's p2p path.
enum ncclNetDeviceType {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3,
};
constexpr int NCCL_NET_DEVICE_INVALID_VERSION = 0x0;
constexpr int NCCL_NET_DEVICE_UNPACK_VERSION = 0x7;

// What connect/accept hand back when the host asked for offload (by passing
// a non-null *devComm). Unchanged from v7 through v11.
struct ncclNetDeviceHandle_v7_t {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;

// ---- version 6 --------------------------------------------------------------
// The oldest table NCCL 2.28 still loads. Sizes of regMr, isend and irecv
// are `int`; connect/accept have no offload argument; init takes only the
// logger and is meant to run once per process.

struct ncclNetProperties_v6_t {
  char* name;      // for logs
  char* pciPath;   // sysfs path of the NIC's PCI function
  uint64_t guid;   // tells apart the ports/functions of one NIC
  int ptrSupport;  // NCCL_PTR_* bits
  int speed;       // Mbit/s
  int port;        // port number on the NIC
  float latency;   // microseconds
  int maxComms;    // comms the device can hold
  int maxRecvs;    // buffers one irecv may post
};

struct ncclNet_v6_t {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
};

// ---- version 7 --------------------------------------------------------------
// Adds device offload: properties report the offload kind and its version;
// connect and accept take a ncclNetDeviceHandle** (in: the host wants
// offload when *devComm is non-null); getDeviceMr and irecvConsumed are
// appended to the table. Sizes are still `int`.

struct ncclNetProperties_v7_t {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;  // new in v7
  int netDeviceVersion;             // new in v7
};

struct ncclNet_v7_t {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v7_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
};

// ---- version 8 --------------------------------------------------------------
// regMr's size becomes size_t (isend/irecv stay `int`); properties gain
// regIsGlobal, inserted after ptrSupport (every later field moves).

struct ncclNetProperties_v8_t {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;  // new in v8: a registration is usable on every comm
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
};

struct ncclNet_v8_t {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
};

// ---- version 9 --------------------------------------------------------------
// isend/irecv sizes become size_t (test and iflush keep `int`); properties
// gain forceFlush (after regIsGlobal) and, at the end, the virtual-NIC
// description and the per-operation size ceilings; makeVDevice is appended.

struct ncclNetVDeviceProps_v9_t {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
};

struct ncclNetProperties_v9_t {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;  // new in v9: receives need iflush even when not GPU-bound
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;  // new in v9
  size_t maxP2pBytes;               // new in v9
  size_t maxCollBytes;              // new in v9
};

struct ncclNet_v9_t {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
};

// ---- version 10 -------------------------------------------------------------
// init also takes the profiler callback; connect takes a per-connection
// config (traffic class) as its second argument; isend/irecv take the
// host's profiler handle(s). Properties are laid out as in v9.

typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;

// NCCL_NET_TRAFFIC_CLASS_UNDEF: "no preference" for trafficClass.
constexpr int NCCL_NET_TRAFFIC_CLASS_UNDEF = -1;

struct ncclNetCommConfig_v10_t {
  int trafficClass;  // plugin-defined value, or NCCL_NET_TRAFFIC_CLASS_UNDEF
};

typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

struct ncclNet_v10_t {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
};

// ---- version 11 (NCCL 2.28's current one) -----------------------------------
// The plugin is initialized once per communicator: init returns a context
// and receives the communicator's id and config (which left connect); listen
// and connect take that context first; finalize(ctx) and setNetAttr are
// appended. Properties gain maxMultiRequestSize at the end.

typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;

struct ncclNetProperties_v11_t {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;  // new in v11: requests one multi-request may bundle
};

// Hints setNetAttr passes to a v11 plugin; every field may be
// NCCL_NET_ATTR_UNDEF ("no hint").
constexpr int NCCL_NET_ATTR_UNDEF = -1;

struct ncclNetCommAttr_v11_t {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
};

struct ncclNetAttr_v11_t {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
};

struct ncclNet_v11_t {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
};

// ---- layout pins (LP64: 8-byte pointers and size_t) --------------------------
// A table is `name` plus N function pointers; a property struct's size and
// the offsets where versions diverge are spelled out, so a member moved by
// an edit fails the build instead of a plugin call.
static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8, "plugin ABI pins assume LP64");
static_assert(sizeof(ncclNetDeviceType) == 4);
static_assert(sizeof(ncclNetDeviceHandle_v7_t) == 32);
static_assert(sizeof(ncclNet_v6_t) == 17 * 8);
static_assert(sizeof(ncclNet_v7_t) == 19 * 8);
static_assert(sizeof(ncclNet_v8_t) == 19 * 8);
static_assert(sizeof(ncclNet_v9_t) == 20 * 8);
static_assert(sizeof(ncclNet_v10_t) == 20 * 8);
static_assert(sizeof(ncclNet_v11_t) == 22 * 8);
static_assert(sizeof(ncclNetProperties_v6_t) == 48 &&
              offsetof(ncclNetProperties_v6_t, speed) == 28);
static_assert(sizeof(ncclNetProperties_v7_t) == 56 &&
              offsetof(ncclNetProperties_v7_t, netDeviceType) == 48);
static_assert(sizeof(ncclNetProperties_v8_t) == 64 &&
              offsetof(ncclNetProperties_v8_t, speed) == 32);
static_assert(sizeof(ncclNetProperties_v9_t) == 104 &&
              offsetof(ncclNetProperties_v9_t, vProps) == 64 &&
              offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88);
static_assert(sizeof(ncclNetProperties_v11_t) == 112 &&
              offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104);
static_assert(offsetof(ncclNet_v11_t, finalize) == 20 * 8);
static_assert(sizeof(ncclNetAttr_v11_t) == 44);

}  // namespace ferry::net::abi
