/*
 * Ferry extensions to the NCCL API. Include after (or instead of) nccl.h.
 *
 * On the host runtime (no GPU, or FERRY_RUNTIME=host) "device" buffers are
 * ordinary host memory and streams are Ferry's emulated streams: create them
 * here, pass them as cudaStream_t, and synchronize here. A NULL stream means
 * the call (or the whole group) completes before it returns.
 * On the CUDA runtime these functions act on real CUDA streams/devices.
 *
 * The symbols carry the `ncclFerry` prefix so the library exports nothing
 * outside the nccl* namespace.
 */
#ifndef FERRY_H_
#define FERRY_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which runtime a new communicator in this process would use. */
typedef enum { ncclFerryRuntimeHost = 0, ncclFerryRuntimeCuda = 1 } ncclFerryRuntime_t;
ncclResult_t ncclFerryGetRuntime(ncclFerryRuntime_t* kind);

/* Device selection for the calling thread (CUDA: cudaSetDevice). */
ncclResult_t ncclFerrySetDevice(int device);
ncclResult_t ncclFerryGetDevice(int* device);
ncclResult_t ncclFerryGetDeviceCount(int* count);

/* Streams of the selected runtime. */
ncclResult_t ncclFerryStreamCreate(cudaStream_t* stream);
ncclResult_t ncclFerryStreamSynchronize(cudaStream_t stream);
ncclResult_t ncclFerryStreamDestroy(cudaStream_t stream);

/* NUL-terminated description of the communicator's ranks, devices, links and
 * ring (truncated to len bytes). */
ncclResult_t ncclFerryCommDescribe(ncclComm_t comm, char* buf, size_t len);

/* Blocking, collective helpers over the communicator's bootstrap network, on
 * host memory. For setup and tests, not for data traffic: they are slow.
 * data holds nranks slots of bytesPerRank; the caller's slot is filled. */
ncclResult_t ncclFerryBootstrapAllGather(ncclComm_t comm, void* data, size_t bytesPerRank);
ncclResult_t ncclFerryBootstrapBarrier(ncclComm_t comm);

/* Point-to-point traffic with one peer since the communicator was created:
 * operations and bytes completed in each direction, and how many sends went
 * straight into the receiver's buffer (zero-copy). Any output may be NULL. */
typedef struct {
  unsigned long long sendOps, sendBytes, sendZeroCopyOps;
  unsigned long long recvOps, recvBytes;
} ncclFerryPeerStats_t;
ncclResult_t ncclFerryCommPeerStats(ncclComm_t comm, int peer, ncclFerryPeerStats_t* stats);

/* Memory this rank's communicator holds (device memory, or host shared
 * memory with SHM): heldBytes, its connections: kernel point-to-point's FIFOs
 * and, once its first collective of each protocol has run
 * (NCCL_RUNTIME_CONNECT=1, the default) or from init (=0), the collective
 * rings'; collectiveFifoBytes, the rings' FIFOs alone (0 while none is set
 * up); stagingBytes, the SM-free path's staging blocks (grown on demand by
 * messages whose buffers a peer cannot map, kept for reuse). Any output may
 * be NULL. */
ncclResult_t ncclFerryCommMemory(ncclComm_t comm, unsigned long long* heldBytes,
                                 unsigned long long* collectiveFifoBytes,
                                 unsigned long long* stagingBytes);

/* Collectives this rank's communicator has launched, by algorithm
 * (NCCL_ALGO): on its own ring, and all-reduces run hierarchically across
 * hosts (README "Collectives across hosts"). Either output may be NULL. */
ncclResult_t ncclFerryCommAlgoStats(ncclComm_t comm, unsigned long long* ringColls,
                                    unsigned long long* hierColls);

/* A window of comm (ncclCommWindowRegister): how many peers' windows this
 * process mapped at registration (peer processes on this host reached over
 * P2P), and whether peer processes can map this rank's buffer (0: e.g. pool
 * or cuMem memory on CUDA; messages touching it are then staged). Either
 * output may be NULL. */
ncclResult_t ncclFerryWindowInfo(ncclComm_t comm, ncclWindow_t win, int* peersMapped,
                                 int* mappable);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_H_ */
