/*
 * An MPI program as users write them, in C: MPI starts the ranks (mpiexec,
 * no ferry-run, no NCCL_COMM_ID), rank 0's ncclGetUniqueId travels by
 * MPI_Bcast, each rank picks its device from its node-local rank, and the
 * program checks every result element by element against values it
 * recomputes for every rank from one seed. Covered: the world communicator
 * (all-reduce, broadcast, all-gather, reduce-scatter, a send/recv ring, an
 * uneven all-to-all as a group of sends and receives), a communicator per
 * MPI_Comm_split colour made from its own unique id, and ncclCommSplit.
 * Exits 0 with "PASS" on every rank; on the first wrong element it prints
 * it and MPI_Abort()s the job.
 *
 * FERRY_TEST_PRINT_CPUS=1: each rank first prints how many CPUs it may run
 * on (mpi_run.sh checks that a bound job really bound every rank to one).
 *
 * Run: mpiexec -n 4 mpi_client   (host runtime: FERRY_RUNTIME=host)
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"
#include "nccl.h"

static int gRank = -1;

#define NCCLCHECK(call)                                                            \
  do {                                                                             \
    ncclResult_t r_ = (call);                                                      \
    if (r_ != ncclSuccess) {                                                       \
      fprintf(stderr, "rank %d: %s failed: %s (%s) at %s:%d\n", gRank, #call,      \
              ncclGetErrorString(r_), ncclGetLastError(NULL), __FILE__, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
    }                                                                              \
  } while (0)

#define EXPECT(cond, ...)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "rank %d: check failed at %s:%d: ", gRank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n");                                                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)

/* The value rank `r` contributes at element `i` of buffer `tag`: every rank
 * can recompute any rank's data. */
static uint64_t mix(uint64_t seed, uint64_t tag, uint64_t r, uint64_t i) {
  uint64_t z = seed ^ (tag * 0x9E3779B97F4A7C15ULL) ^ (r << 40) ^ i;
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static void* poisoned(size_t bytes) {
  void* p = malloc(bytes > 0 ? bytes : 1);
  EXPECT(p != NULL, "out of memory for %zu bytes", bytes);
  memset(p, 0x5A, bytes);
  return p;
}

/* Sum of int32 inputs: exact, so compared exactly. */
static void checkAllReduce(ncclComm_t comm, uint64_t seed, int rank, int n, uint64_t tag) {
  const size_t count = 100003;
  int32_t* in = poisoned(count * sizeof(int32_t));
  int32_t* out = poisoned(count * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) in[i] = (int32_t)(mix(seed, tag, rank, i) % 2000001) - 1000000;
  NCCLCHECK(ncclAllReduce(in, out, count, ncclInt32, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    int64_t want = 0;
    for (int r = 0; r < n; ++r) want += (int32_t)(mix(seed, tag, r, i) % 2000001) - 1000000;
    EXPECT(out[i] == (int32_t)want, "all-reduce element %zu: %d, expected %lld", i, out[i],
           (long long)want);
  }
  free(in);
  free(out);
}

/* Float bits from the root, compared bit for bit. */
static void checkBroadcast(ncclComm_t comm, uint64_t seed, int rank, int n) {
  const size_t count = 65537;
  const int root = n - 1;
  float* buf = poisoned(count * sizeof(float));
  if (rank == root) {
    for (size_t i = 0; i < count; ++i) buf[i] = (float)(mix(seed, 2, root, i) % 1000003) / 7.0f;
  }
  NCCLCHECK(ncclBroadcast(buf, buf, count, ncclFloat32, root, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    float want = (float)(mix(seed, 2, root, i) % 1000003) / 7.0f;
    EXPECT(memcmp(&buf[i], &want, sizeof(float)) == 0, "broadcast element %zu: %g, expected %g", i,
           buf[i], want);
  }
  free(buf);
}

static void checkAllGather(ncclComm_t comm, uint64_t seed, int rank, int n) {
  const size_t count = 40961;
  uint8_t* in = poisoned(count);
  uint8_t* out = poisoned(count * n);
  for (size_t i = 0; i < count; ++i) in[i] = (uint8_t)mix(seed, 3, rank, i);
  NCCLCHECK(ncclAllGather(in, out, count, ncclUint8, comm, NULL));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      uint8_t want = (uint8_t)mix(seed, 3, r, i);
      EXPECT(out[r * count + i] == want, "all-gather slot %d byte %zu: %u, expected %u", r, i,
             out[r * count + i], want);
    }
  }
  free(in);
  free(out);
}

static void checkReduceScatter(ncclComm_t comm, uint64_t seed, int rank, int n) {
  const size_t count = 30011;
  int64_t* in = poisoned(count * n * sizeof(int64_t));
  int64_t* out = poisoned(count * sizeof(int64_t));
  for (size_t i = 0; i < count * n; ++i) in[i] = (int64_t)mix(seed, 4, rank, i);
  NCCLCHECK(ncclReduceScatter(in, out, count, ncclInt64, ncclMax, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    int64_t want = INT64_MIN;
    for (int r = 0; r < n; ++r) {
      int64_t v = (int64_t)mix(seed, 4, r, rank * count + i);
      if (v > want) want = v;
    }
    EXPECT(out[i] == want, "reduce-scatter element %zu: %lld, expected %lld", i, (long long)out[i],
           (long long)want);
  }
  free(in);
  free(out);
}

/* How many uint32 elements rank `src` sends rank `dst` in the all-to-all:
 * uneven, some zero. */
static size_t a2aCount(uint64_t seed, int src, int dst) {
  return (size_t)(mix(seed, 6, src, (uint64_t)dst) % 5) * 12289;
}

/* A ring of sends and receives, then an uneven all-to-all, each one group. */
static void checkPointToPoint(ncclComm_t comm, uint64_t seed, int rank, int n) {
  const size_t count = (1 << 20) + 3;
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  uint32_t* out = poisoned(count * sizeof(uint32_t));
  uint32_t* in = poisoned(count * sizeof(uint32_t));
  for (size_t i = 0; i < count; ++i) out[i] = (uint32_t)mix(seed, 5, rank, i);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(out, count, ncclUint32, next, comm, NULL));
  NCCLCHECK(ncclRecv(in, count, ncclUint32, prev, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  for (size_t i = 0; i < count; ++i) {
    EXPECT(in[i] == (uint32_t)mix(seed, 5, prev, i), "ring element %zu from rank %d wrong", i,
           prev);
  }
  free(out);
  free(in);

  uint32_t** sendBufs = calloc((size_t)n, sizeof(uint32_t*));
  uint32_t** recvBufs = calloc((size_t)n, sizeof(uint32_t*));
  EXPECT(sendBufs != NULL && recvBufs != NULL, "out of memory");
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < n; ++p) {
    size_t s = a2aCount(seed, rank, p), r = a2aCount(seed, p, rank);
    sendBufs[p] = poisoned(s * sizeof(uint32_t));
    recvBufs[p] = poisoned(r * sizeof(uint32_t));
    for (size_t i = 0; i < s; ++i) sendBufs[p][i] = (uint32_t)mix(seed, 7 + p, rank, i);
    NCCLCHECK(ncclSend(sendBufs[p], s, ncclUint32, p, comm, NULL));
    NCCLCHECK(ncclRecv(recvBufs[p], r, ncclUint32, p, comm, NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int p = 0; p < n; ++p) {
    size_t r = a2aCount(seed, p, rank);
    for (size_t i = 0; i < r; ++i) {
      uint32_t want = (uint32_t)mix(seed, 7 + rank, p, i);
      EXPECT(recvBufs[p][i] == want, "all-to-all from rank %d element %zu: %u, expected %u", p, i,
             recvBufs[p][i], want);
    }
    free(sendBufs[p]);
    free(recvBufs[p]);
  }
  free(sendBufs);
  free(recvBufs);
}

/* Every check on one communicator whose ranks are `rank` of `n`. */
static void checkAll(ncclComm_t comm, uint64_t seed, int rank, int n) {
  int count = -1, me = -1;
  NCCLCHECK(ncclCommCount(comm, &count));
  NCCLCHECK(ncclCommUserRank(comm, &me));
  EXPECT(count == n && me == rank, "communicator says rank %d of %d, MPI says %d of %d", me, count,
         rank, n);
  checkAllReduce(comm, seed, rank, n, 1);
  checkBroadcast(comm, seed, rank, n);
  checkAllGather(comm, seed, rank, n);
  checkReduceScatter(comm, seed, rank, n);
  checkPointToPoint(comm, seed, rank, n);
}

/* A communicator over `mpiComm`, from a unique id its rank 0 makes. */
static ncclComm_t commOver(MPI_Comm mpiComm) {
  int rank = 0, n = 0;
  MPI_Comm_rank(mpiComm, &rank);
  MPI_Comm_size(mpiComm, &n);
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, mpiComm);
  ncclComm_t comm = NULL;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  return comm;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  gRank = rank;
  if (getenv("FERRY_TEST_PRINT_CPUS") != NULL) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    EXPECT(sched_getaffinity(0, sizeof(cpus), &cpus) == 0, "sched_getaffinity failed");
    printf("rank %d allowed CPUs: %d\n", rank, CPU_COUNT(&cpus));
    fflush(stdout);
  }

  /* The node-local rank picks the device (as cudaSetDevice(localRank)). */
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int localRank = 0, devices = 0;
  MPI_Comm_rank(node, &localRank);
  NCCLCHECK(ncclFerryGetDeviceCount(&devices));
  EXPECT(devices > 0, "no devices");
  NCCLCHECK(ncclFerrySetDevice(localRank % devices));

  /* One seed for the whole job, fresh every run. */
  uint64_t seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

  ncclComm_t world = commOver(MPI_COMM_WORLD);
  checkAll(world, seed, rank, n);

  /* Halves by MPI, each with its own id: two communicators initialized at
   * once on disjoint ranks. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  int halfRank = 0, halfSize = 0;
  MPI_Comm_rank(half, &halfRank);
  MPI_Comm_size(half, &halfSize);
  ncclComm_t mine = commOver(half);
  checkAll(mine, seed ^ 0xABCDEFULL ^ (uint64_t)(rank % 2), halfRank, halfSize);

  /* The same halves by ncclCommSplit, ranks in reverse order by key. */
  ncclComm_t split = NULL;
  NCCLCHECK(ncclCommSplit(world, rank % 2, n - rank, &split, NULL));
  EXPECT(split != NULL, "ncclCommSplit gave no communicator");
  checkAll(split, seed ^ 0x1234567ULL ^ (uint64_t)(rank % 2), halfSize - 1 - halfRank, halfSize);

  NCCLCHECK(ncclCommDestroy(split));
  NCCLCHECK(ncclCommDestroy(mine));
  NCCLCHECK(ncclCommDestroy(world));
  MPI_Comm_free(&half);
  MPI_Comm_free(&node);
  MPI_Barrier(MPI_COMM_WORLD);
  printf("rank %d of %d: PASS\n", rank, n);
  MPI_Finalize();
  return 0;
}
