/*
 * Ferry — NCCL 2.28-compatible public API.
 *
 * This header declares the NCCL 2.28 host API with identical types, enum
 * values, struct layouts and function signatures, so programs built against
 * NVIDIA's header run unchanged on Ferry's libnccl.so.2 (and vice versa).
 * Every function also has a `pnccl` twin (the profiling alias NCCL exports).
 *
 * Threading: a communicator may be used by one thread at a time; different
 * communicators may be used concurrently. ncclCommAbort and
 * ncclCommGetAsyncError may be called from any thread at any time.
 */
#ifndef NCCL_H_
#define NCCL_H_
/* Marks this header as Ferry's; Ferry's sources refuse to build without it. */
#define FERRY_NCCL_H 1

#if !defined(FERRY_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define FERRY_HAVE_CUDA_HEADERS 1
#endif
#endif

#ifdef FERRY_HAVE_CUDA_HEADERS
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(__cplusplus)
#include <cuda_fp8.h>
#endif
#else
/* Without CUDA's headers, a stream is the same opaque pointer type CUDA uses. */
typedef struct CUstream_st* cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
/* Versions up to 2.8 used X*1000+Y*100+Z; later ones X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

#include <limits.h>
#include <stddef.h>

/* Communicator and window handles are opaque pointers. */
typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The identifier every rank of one communicator must be given. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Result of every call. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* Values of ncclConfig_t.CTAPolicy. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* ncclCommRevoke flags (none defined yet; pass 0). */
#define NCCL_REVOKE_DEFAULT 0x00

/* Per-communicator options. Always start from NCCL_CONFIG_INITIALIZER: the
 * library checks size, magic and version before reading any other field. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                    \
  }

/* Filled by ncclGroupSimulateEnd. Start from NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                        \
  {                                                                                      \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_UNDEF_FLOAT                                                                 \
  }

/* Reduction operators. Values from ncclNumOps up to ncclMaxRedOp are handed
 * out by ncclRedOpCreatePreMulSum. The enum keeps the size of an int. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Element types. */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the PreMulSum scalar lives. Device: read while the collective runs.
 * HostImmediate: read before ncclRedOpCreatePreMulSum returns. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Declares both the function and its pncclX profiling twin. */
#define FERRY_NCCL_DECL(ret, name, args) \
  ret name args;                         \
  ret p##name args;

/* Memory suited to zero-copy and registration; may round the size up. */
FERRY_NCCL_DECL(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))
FERRY_NCCL_DECL(ncclResult_t, ncclMemFree, (void* ptr))

/* NCCL_VERSION_CODE of the library actually loaded. */
FERRY_NCCL_DECL(ncclResult_t, ncclGetVersion, (int* version))

/* Call once (on one rank) and hand the result to every rank. */
FERRY_NCCL_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))

/* Communicator creation. Every rank calls with the same id and nranks; each
 * rank uses the CUDA device current at the call. Collective across ranks:
 * call from different threads/processes, or inside a group. */
FERRY_NCCL_DECL(ncclResult_t, ncclCommInitRankConfig,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                 ncclConfig_t* config))
FERRY_NCCL_DECL(ncclResult_t, ncclCommInitRank,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
/* One process, ndev devices (devlist NULL: devices 0..ndev-1). */
FERRY_NCCL_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist))
/* Finalize flushes outstanding work; Destroy frees; Abort stops everything. */
FERRY_NCCL_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
FERRY_NCCL_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
FERRY_NCCL_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
FERRY_NCCL_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
/* New communicators from the ranks of an existing one. */
FERRY_NCCL_DECL(ncclResult_t, ncclCommSplit,
                (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))
FERRY_NCCL_DECL(ncclResult_t, ncclCommShrink,
                (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                 ncclConfig_t* config, int shrinkFlags))
FERRY_NCCL_DECL(ncclResult_t, ncclCommInitRankScalable,
                (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                 ncclConfig_t* config))

/* Error reporting. */
FERRY_NCCL_DECL(const char*, ncclGetErrorString, (ncclResult_t result))
FERRY_NCCL_DECL(const char*, ncclGetLastError, (ncclComm_t comm))
/* Deprecated in NCCL; kept for ABI compatibility. */
__attribute__((deprecated("ncclResetDebugInit is not part of the supported API"))) void
ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not part of the supported API"))) void
pncclResetDebugInit(void);
FERRY_NCCL_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))

/* Communicator queries. */
FERRY_NCCL_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))
FERRY_NCCL_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))
FERRY_NCCL_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

/* Buffer registration. */
FERRY_NCCL_DECL(ncclResult_t, ncclCommRegister,
                (const ncclComm_t comm, void* buff, size_t size, void** handle))
FERRY_NCCL_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))
FERRY_NCCL_DECL(ncclResult_t, ncclCommWindowRegister,
                (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))
FERRY_NCCL_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

/* Custom reduction: multiply inputs by `scalar`, then sum. */
FERRY_NCCL_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
                (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype,
                 ncclScalarResidence_t residence, ncclComm_t comm))
FERRY_NCCL_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))

/* Collectives. Enqueued on `stream`; complete when the stream reaches them. */
FERRY_NCCL_DECL(ncclResult_t, ncclReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclBcast,
                (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                 cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclBroadcast,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclAllReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclReduceScatter,
                (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclAllGather,
                (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclAlltoAll,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclGather,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclScatter,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream))

/* Point-to-point. A send must be matched by a recv of the same size. */
FERRY_NCCL_DECL(ncclResult_t, ncclSend,
                (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream))
FERRY_NCCL_DECL(ncclResult_t, ncclRecv,
                (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream))

/* Groups: calls between Start and End are issued together at End. Nestable. */
FERRY_NCCL_DECL(ncclResult_t, ncclGroupStart, (void))
FERRY_NCCL_DECL(ncclResult_t, ncclGroupEnd, (void))
FERRY_NCCL_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

#undef FERRY_NCCL_DECL

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
