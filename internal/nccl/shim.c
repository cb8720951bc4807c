//go:build cgo

// See shim.h. Declarations are written from the NCCL and CUDA API facts in gpubench's reference
// notes; no header of either is included.
#include "shim.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

typedef int ncclResult_t;
typedef void *ncclComm_t;
typedef void *cudaStream_t;
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
typedef struct {
  char internal[128];
} ncclUniqueId;

// ncclConfig_t as NCCL 2.28 laid it out (80 bytes). NCCL reads min(size, its own size) bytes and
// resets the fields newer than the version given, so the layout of 2.14 (24 bytes, version 21400)
// serves older libraries. Fields gpubench leaves alone hold NCCL_CONFIG_UNDEF_INT (INT_MIN) or NULL.
typedef struct {
  size_t size;
  unsigned int magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
  int splitShare, trafficClass;
  const char *commName;
  int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched;
} gnConfig;
_Static_assert(sizeof(gnConfig) == 80, "ncclConfig_t 2.28 layout");

enum { ncclInProgress = 7, cudaErrorNotReady = 600, cudaStreamNonBlocking = 1, cudaStreamCaptureModeThreadLocal = 1 };

static struct {
  int loaded, version;
  ncclResult_t (*ncclGetVersion)(int *);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *);
  ncclResult_t (*ncclCommInitAll)(ncclComm_t *, int, const int *);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*ncclCommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, gnConfig *); // optional, 2.14
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*ncclGetErrorString)(ncclResult_t);
  const char *(*ncclGetLastError)(ncclComm_t); // optional, 2.13
  ncclResult_t (*ncclGroupStart)(void);
  ncclResult_t (*ncclGroupEnd)(void);
  ncclResult_t (*ncclAllReduce)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclBroadcast)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclReduce)(const void *, void *, size_t, int, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclAllGather)(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclAlltoAll)(const void *, void *, size_t, int, ncclComm_t, cudaStream_t); // optional, 2.28
  ncclResult_t (*ncclSend)(const void *, size_t, int, int, ncclComm_t, cudaStream_t);          // optional, 2.7
  ncclResult_t (*ncclRecv)(void *, size_t, int, int, ncclComm_t, cudaStream_t);                // optional, 2.7
  ncclResult_t (*ncclMemAlloc)(void **, size_t);                                              // optional, 2.19
  ncclResult_t (*ncclMemFree)(void *);                                                         // optional, 2.19
  // From libcudart.
  int (*cudaSetDevice)(int);
  int (*cudaStreamCreateWithFlags)(cudaStream_t *, unsigned int);
  int (*cudaStreamDestroy)(cudaStream_t);
  int (*cudaStreamQuery)(cudaStream_t);
  int (*cudaGetLastError)(void);
  int (*cudaEventCreateWithFlags)(void **, unsigned int);
  int (*cudaEventRecord)(void *, cudaStream_t);
  int (*cudaEventElapsedTime)(float *, void *, void *);
  int (*cudaEventDestroy)(void *);
  int (*cudaStreamBeginCapture)(cudaStream_t, int);                             // optional
  int (*cudaStreamEndCapture)(cudaStream_t, cudaGraph_t *);                     // optional
  int (*cudaGraphInstantiateWithFlags)(cudaGraphExec_t *, cudaGraph_t, unsigned long long); // optional, 11.4
  int (*cudaGraphLaunch)(cudaGraphExec_t, cudaStream_t);                        // optional
  int (*cudaGraphExecDestroy)(cudaGraphExec_t);                                 // optional
  int (*cudaGraphDestroy)(cudaGraph_t);                                         // optional
} N;

static int need(void *h, const char *name, void **slot, const char *path, char *err, size_t errlen) {
  *slot = dlsym(h, name);
  if (*slot) return 1;
  snprintf(err, errlen, "%s: missing symbol %s", path, name);
  return 0;
}

#define NEED(h, sym, path) need(h, #sym, (void **)&N.sym, path, err, errlen)
#define MAY(h, sym) (N.sym = (void *)dlsym(h, #sym))

int gn_load(const char *nccl_path, const char *cudart_path, char *err, size_t errlen) {
  if (N.loaded) return 1;
  void *h = dlopen(nccl_path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(err, errlen, "%s", dlerror());
    return 0;
  }
  void *c = dlopen(cudart_path, RTLD_NOW | RTLD_LOCAL); // already loaded: the same handle
  if (!c) {
    snprintf(err, errlen, "%s", dlerror());
    dlclose(h);
    return 0;
  }
  int ok = NEED(h, ncclGetVersion, nccl_path) && NEED(h, ncclGetUniqueId, nccl_path) &&
           NEED(h, ncclCommInitAll, nccl_path) && NEED(h, ncclCommInitRank, nccl_path) &&
           NEED(h, ncclCommDestroy, nccl_path) &&
           NEED(h, ncclCommAbort, nccl_path) && NEED(h, ncclCommGetAsyncError, nccl_path) &&
           NEED(h, ncclGetErrorString, nccl_path) && NEED(h, ncclGroupStart, nccl_path) &&
           NEED(h, ncclGroupEnd, nccl_path) && NEED(h, ncclAllReduce, nccl_path) &&
           NEED(h, ncclBroadcast, nccl_path) && NEED(h, ncclReduce, nccl_path) &&
           NEED(h, ncclAllGather, nccl_path) && NEED(h, ncclReduceScatter, nccl_path) &&
           NEED(c, cudaSetDevice, cudart_path) && NEED(c, cudaStreamCreateWithFlags, cudart_path) &&
           NEED(c, cudaStreamDestroy, cudart_path) && NEED(c, cudaStreamQuery, cudart_path) &&
           NEED(c, cudaGetLastError, cudart_path) && NEED(c, cudaEventCreateWithFlags, cudart_path) &&
           NEED(c, cudaEventRecord, cudart_path) && NEED(c, cudaEventElapsedTime, cudart_path) &&
           NEED(c, cudaEventDestroy, cudart_path);
  if (!ok) {
    dlclose(h);
    dlclose(c);
    memset(&N, 0, sizeof N);
    return 0;
  }
  MAY(h, ncclCommInitRankConfig);
  MAY(h, ncclGetLastError);
  MAY(h, ncclAlltoAll);
  MAY(h, ncclSend);
  MAY(h, ncclRecv);
  MAY(h, ncclMemAlloc);
  MAY(h, ncclMemFree);
  MAY(c, cudaStreamBeginCapture);
  MAY(c, cudaStreamEndCapture);
  MAY(c, cudaGraphInstantiateWithFlags);
  MAY(c, cudaGraphLaunch);
  MAY(c, cudaGraphExecDestroy);
  MAY(c, cudaGraphDestroy);
  N.ncclGetVersion(&N.version);
  N.loaded = 1;
  return 1;
}

int gn_version(int *version) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  *version = N.version;
  return 0;
}

int gn_has(int what) {
  if (!N.loaded) return 0;
  switch (what) {
  case GN_HAS_ALLTOALL: return N.ncclAlltoAll != NULL && N.version >= 22800;
  case GN_HAS_SENDRECV: return N.ncclSend != NULL && N.ncclRecv != NULL;
  case GN_HAS_CONFIG: return N.ncclCommInitRankConfig != NULL && N.version >= 21400;
  case GN_HAS_MEMALLOC: return N.ncclMemAlloc != NULL && N.ncclMemFree != NULL && N.version >= 21900;
  case GN_HAS_GRAPH: // NCCL can be captured from 2.9
    return N.version >= 20900 && N.cudaStreamBeginCapture && N.cudaStreamEndCapture && N.cudaGraphInstantiateWithFlags &&
           N.cudaGraphLaunch && N.cudaGraphExecDestroy && N.cudaGraphDestroy;
  }
  return 0;
}

const char *gn_nccl_error_string(int code) {
  switch (code) {
  case GN_ERR_NOT_LOADED: return "the NCCL library is not loaded";
  case GN_ERR_NO_SYMBOL: return "the loaded libraries lack this entry point";
  }
  return N.loaded ? N.ncclGetErrorString(code) : "unknown";
}

const char *gn_last_error(void) { return N.loaded && N.ncclGetLastError ? N.ncclGetLastError(NULL) : ""; }

#define CUDA(call)                                                                                 \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_) {                                                                                     \
      N.cudaGetLastError();                                                                        \
      return -rc_;                                                                                 \
    }                                                                                              \
  } while (0)

static int abort_all(int n, void **comms);

// settle waits until non-blocking communicators leave ncclInProgress: only when
// NCCL_COMM_BLOCKING=0 makes them non-blocking behind gpubench's back.
static int settle(int n, void **comms) {
  for (int i = 0; i < n; i++) {
    if (!comms[i]) continue;
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      int q = N.ncclCommGetAsyncError(comms[i], &state);
      if (q) return q;
      if (state == ncclInProgress) sched_yield();
    }
    if (state) return state;
  }
  return 0;
}

// group_end closes a group; on non-blocking communicators it waits until they settle.
static int group_end(int n, void **comms) {
  int rc = N.ncclGroupEnd();
  return rc == ncclInProgress ? settle(n, comms) : rc;
}

// config is the communicators' configuration: blocking, and from 2.28 nvlinkCentricSched.
static gnConfig config(void) {
  gnConfig cfg = {24, 0xcafebeef, 21400, 1, INT_MIN, INT_MIN, INT_MIN, NULL, INT_MIN, INT_MIN, NULL,
                  INT_MIN, INT_MIN, INT_MIN, INT_MIN, INT_MIN, INT_MIN};
  if (N.version >= 22800) {
    cfg.size = sizeof cfg;
    cfg.version = 22800;
    cfg.nvlinkCentricSched = 1;
  }
  return cfg;
}

int gn_comm_init(int n, const int *devs, void **comms, void **streams) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  for (int i = 0; i < n; i++) {
    CUDA(N.cudaSetDevice(devs[i]));
    CUDA(N.cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
  }
  if (!gn_has(GN_HAS_CONFIG)) return N.ncclCommInitAll(comms, n, devs);
  ncclUniqueId id;
  int rc = N.ncclGetUniqueId(&id);
  if (rc) return rc;
  gnConfig cfg = config();
  rc = N.ncclGroupStart();
  for (int i = 0; i < n && !rc; i++) {
    int c = N.cudaSetDevice(devs[i]);
    if (c) {
      N.ncclGroupEnd();
      return -c;
    }
    rc = N.ncclCommInitRankConfig(&comms[i], n, id, i, &cfg);
    if (rc == ncclInProgress) rc = 0;
  }
  int end = group_end(n, comms);
  return rc ? rc : end;
}

int gn_mem_alloc(int dev, size_t n, void **ptr) {
  if (!gn_has(GN_HAS_MEMALLOC)) return GN_ERR_NO_SYMBOL;
  CUDA(N.cudaSetDevice(dev));
  return N.ncclMemAlloc(ptr, n);
}

int gn_mem_free(int dev, void *ptr) {
  if (!gn_has(GN_HAS_MEMALLOC)) return GN_ERR_NO_SYMBOL;
  CUDA(N.cudaSetDevice(dev));
  return N.ncclMemFree(ptr);
}

int gn_unique_id(char *out) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  ncclUniqueId id;
  int rc = N.ncclGetUniqueId(&id);
  if (!rc) memcpy(out, &id, sizeof id);
  return rc;
}

int gn_comm_init_rank(int dev, int nranks, const char *id_bytes, int rank, void **comm, void **stream) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  CUDA(N.cudaSetDevice(dev));
  CUDA(N.cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
  ncclUniqueId id;
  memcpy(&id, id_bytes, sizeof id);
  if (!gn_has(GN_HAS_CONFIG)) return N.ncclCommInitRank((ncclComm_t *)comm, nranks, id, rank);
  gnConfig cfg = config();
  int rc = N.ncclCommInitRankConfig((ncclComm_t *)comm, nranks, id, rank, &cfg);
  while (rc == ncclInProgress) { // only when NCCL_COMM_BLOCKING=0 overrides the configuration
    ncclResult_t state = ncclInProgress;
    rc = N.ncclCommGetAsyncError(*comm, &state);
    if (!rc) rc = state;
    if (rc == ncclInProgress) sched_yield();
  }
  return rc;
}

int gn_comm_destroy(int n, const int *devs, void **comms, void **streams, int abort) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  int first = abort ? abort_all(n, comms) : 0;
  for (int i = 0; i < n; i++) {
    if (comms[i]) {
      int rc = N.ncclCommDestroy(comms[i]);
      if (rc && !first) first = rc;
      comms[i] = NULL;
    }
    if (streams[i]) {
      N.cudaSetDevice(devs[i]);
      int rc = N.cudaStreamDestroy(streams[i]);
      if (rc && !first) first = -rc;
    }
  }
  return first;
}

static void *abort_one(void *comm) {
  return (void *)(long)N.ncclCommAbort(comm);
}

// abort_all aborts every communicator. Before NCCL 2.14 an abort frees its rank at once while
// the peers' kernels may still use it, so all ranks must abort together: one thread each.
static int abort_all(int n, void **comms) {
  int first = 0;
  if (N.version >= 21400) {
    for (int i = 0; i < n; i++) {
      int rc = comms[i] ? N.ncclCommAbort(comms[i]) : 0;
      if (rc && !first) first = rc;
      comms[i] = NULL;
    }
    return first;
  }
  pthread_t t[n];
  int started[n];
  for (int i = 0; i < n; i++) started[i] = comms[i] && pthread_create(&t[i], NULL, abort_one, comms[i]) == 0;
  for (int i = 0; i < n; i++) {
    void *rc = NULL;
    if (started[i]) pthread_join(t[i], &rc);
    else if (comms[i]) rc = abort_one(comms[i]);
    if (rc && !first) first = (int)(long)rc;
    comms[i] = NULL;
  }
  return first;
}

int gn_comm_abort(int n, void **comms) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  return abort_all(n, comms);
}

int gn_collective(int kind, int n, void **comms, void **streams, void **send, void **recv, size_t count,
                  int dtype, int op, int root) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  if (kind == GN_ALLTOALL && !gn_has(GN_HAS_ALLTOALL)) return GN_ERR_NO_SYMBOL;
  // As nccl-tests: a group only when this thread drives several GPUs; one call needs none.
  int grouped = n > 1;
  int rc = grouped ? N.ncclGroupStart() : 0;
  for (int i = 0; i < n && !rc; i++) {
    switch (kind) {
    case GN_ALLREDUCE: rc = N.ncclAllReduce(send[i], recv[i], count, dtype, op, comms[i], streams[i]); break;
    case GN_ALLGATHER: rc = N.ncclAllGather(send[i], recv[i], count, dtype, comms[i], streams[i]); break;
    case GN_REDUCESCATTER: rc = N.ncclReduceScatter(send[i], recv[i], count, dtype, op, comms[i], streams[i]); break;
    case GN_BROADCAST: rc = N.ncclBroadcast(send[i], recv[i], count, dtype, root, comms[i], streams[i]); break;
    case GN_REDUCE: rc = N.ncclReduce(send[i], recv[i], count, dtype, op, root, comms[i], streams[i]); break;
    case GN_ALLTOALL: rc = N.ncclAlltoAll(send[i], recv[i], count, dtype, comms[i], streams[i]); break;
    }
    if (rc == ncclInProgress) rc = grouped ? 0 : settle(n, comms);
  }
  if (!grouped) return rc;
  int end = group_end(n, comms);
  return rc ? rc : end;
}

int gn_sendrecv(int n, int nops, void **comms, void **streams, const int *rank, const int *peer, const int *is_send,
                void **buf, size_t count, int dtype) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  if (!gn_has(GN_HAS_SENDRECV)) return GN_ERR_NO_SYMBOL;
  int rc = N.ncclGroupStart();
  for (int i = 0; i < nops && !rc; i++) {
    int r = rank[i];
    rc = is_send[i] ? N.ncclSend(buf[i], count, dtype, peer[i], comms[r], streams[r])
                    : N.ncclRecv(buf[i], count, dtype, peer[i], comms[r], streams[r]);
    if (rc == ncclInProgress) rc = 0;
  }
  int end = group_end(n, comms);
  return rc ? rc : end;
}

int gn_event_create(int n, const int *devs, void **events) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  for (int i = 0; i < n; i++) {
    CUDA(N.cudaSetDevice(devs[i]));
    CUDA(N.cudaEventCreateWithFlags(&events[i], 0)); // cudaEventDefault: with timing
  }
  return 0;
}

int gn_record(int n, const int *devs, void **streams, void **events) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  for (int i = 0; i < n; i++) {
    CUDA(N.cudaSetDevice(devs[i]));
    CUDA(N.cudaEventRecord(events[i], streams[i]));
  }
  return 0;
}

int gn_elapsed(void *start, void *end, float *ms) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  CUDA(N.cudaEventElapsedTime(ms, start, end));
  return 0;
}

int gn_event_destroy(int n, void **events) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  int first = 0;
  for (int i = 0; i < n; i++) {
    if (!events[i]) continue;
    int rc = N.cudaEventDestroy(events[i]);
    if (rc && !first) first = -rc;
    events[i] = NULL;
  }
  return first;
}

int gn_query(int n, void **comms, void **streams, int *busy, int *async) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  for (int i = 0; i < n; i++) {
    int rc = N.cudaStreamQuery(streams[i]);
    busy[i] = rc == cudaErrorNotReady;
    if (rc && rc != cudaErrorNotReady) {
      N.cudaGetLastError();
      return -rc;
    }
    ncclResult_t e = 0;
    async[i] = 0;
    if (comms[i] && N.ncclCommGetAsyncError(comms[i], &e) == 0) async[i] = e == ncclInProgress ? 0 : e;
  }
  return 0;
}

int gn_begin_capture(int n, const int *devs, void **streams) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  if (!gn_has(GN_HAS_GRAPH)) return GN_ERR_NO_SYMBOL;
  for (int i = 0; i < n; i++) {
    CUDA(N.cudaSetDevice(devs[i]));
    CUDA(N.cudaStreamBeginCapture(streams[i], cudaStreamCaptureModeThreadLocal));
  }
  return 0;
}

// gn_end_capture ends the capture on every stream, even after one fails, so that none is left
// capturing.
int gn_end_capture(int n, const int *devs, void **streams, void **execs) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  int first = 0;
  for (int i = 0; i < n; i++) {
    cudaGraph_t g = NULL;
    int rc = N.cudaSetDevice(devs[i]);
    if (!rc) rc = N.cudaStreamEndCapture(streams[i], &g);
    if (!rc) rc = N.cudaGraphInstantiateWithFlags(&execs[i], g, 0);
    if (g) N.cudaGraphDestroy(g);
    if (rc && !first) first = -rc;
  }
  if (first) N.cudaGetLastError();
  return first;
}

int gn_graph_launch(int n, const int *devs, void **execs, void **streams) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  for (int i = 0; i < n; i++) {
    CUDA(N.cudaSetDevice(devs[i]));
    CUDA(N.cudaGraphLaunch(execs[i], streams[i]));
  }
  return 0;
}

int gn_graph_destroy(int n, void **execs) {
  if (!N.loaded) return GN_ERR_NOT_LOADED;
  for (int i = 0; i < n; i++)
    if (execs[i]) N.cudaGraphExecDestroy(execs[i]);
  return 0;
}
