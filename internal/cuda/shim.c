//go:build cgo

// See shim.h. Everything here runs inside single cgo calls.
#define _GNU_SOURCE // sched_setaffinity and cpu_set_t
#include "shim.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *);

enum {
  cudaSuccess = 0,
  cudaErrorNotReady = 600,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaStreamNonBlocking = 0x01,
  cudaEventDisableTiming = 0x02,
  cudaHostAllocPortable = 0x01,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};

// The function table. Required entries fail the load when missing; getDeviceProperties is optional.
static struct {
  int loaded;
  void *handle;
  cudaError_t (*cudaGetDeviceCount)(int *);
  cudaError_t (*cudaSetDevice)(int);
  cudaError_t (*cudaDeviceGetAttribute)(int *, int, int);
  cudaError_t (*cudaDeviceGetPCIBusId)(char *, int, int);
  cudaError_t (*cudaDriverGetVersion)(int *);
  cudaError_t (*cudaRuntimeGetVersion)(int *);
  const char *(*cudaGetErrorName)(cudaError_t);
  const char *(*cudaGetErrorString)(cudaError_t);
  cudaError_t (*cudaGetLastError)(void);
  cudaError_t (*cudaMalloc)(void **, size_t);
  cudaError_t (*cudaFree)(void *);
  cudaError_t (*cudaHostAlloc)(void **, size_t, unsigned int);
  cudaError_t (*cudaFreeHost)(void *);
  cudaError_t (*cudaMemset)(void *, int, size_t);
  cudaError_t (*cudaMemcpy)(void *, const void *, size_t, int);
  cudaError_t (*cudaMemcpyAsync)(void *, const void *, size_t, int, cudaStream_t);
  cudaError_t (*cudaMemcpyPeerAsync)(void *, int, const void *, int, size_t, cudaStream_t);
  cudaError_t (*cudaMemGetInfo)(size_t *, size_t *);
  cudaError_t (*cudaStreamCreateWithFlags)(cudaStream_t *, unsigned int);
  cudaError_t (*cudaStreamSynchronize)(cudaStream_t);
  cudaError_t (*cudaStreamQuery)(cudaStream_t);
  cudaError_t (*cudaStreamDestroy)(cudaStream_t);
  cudaError_t (*cudaStreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned int);
  cudaError_t (*cudaEventCreateWithFlags)(cudaEvent_t *, unsigned int);
  cudaError_t (*cudaEventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*cudaEventElapsedTime)(float *, cudaEvent_t, cudaEvent_t);
  cudaError_t (*cudaEventDestroy)(cudaEvent_t);
  cudaError_t (*cudaDeviceSynchronize)(void);
  cudaError_t (*cudaDeviceCanAccessPeer)(int *, int, int);
  cudaError_t (*cudaDeviceEnablePeerAccess)(int, unsigned int);
  cudaError_t (*cudaDeviceDisablePeerAccess)(int);
  cudaError_t (*cudaDeviceGetP2PAttribute)(int *, int, int, int);
  cudaError_t (*cudaLaunchHostFunc)(cudaStream_t, cudaHostFn_t, void *);
  cudaError_t (*getDeviceProperties)(void *, int);
} T;

#define REQUIRED(name) {#name, (void **)&T.name}
static const struct {
  const char *name;
  void **slot;
} required[] = {
    REQUIRED(cudaGetDeviceCount), REQUIRED(cudaSetDevice), REQUIRED(cudaDeviceGetAttribute),
    REQUIRED(cudaDeviceGetPCIBusId), REQUIRED(cudaDriverGetVersion), REQUIRED(cudaRuntimeGetVersion),
    REQUIRED(cudaGetErrorName), REQUIRED(cudaGetErrorString), REQUIRED(cudaGetLastError),
    REQUIRED(cudaMalloc), REQUIRED(cudaFree), REQUIRED(cudaHostAlloc), REQUIRED(cudaFreeHost),
    REQUIRED(cudaMemset), REQUIRED(cudaMemcpy), REQUIRED(cudaMemcpyAsync), REQUIRED(cudaMemcpyPeerAsync),
    REQUIRED(cudaMemGetInfo), REQUIRED(cudaStreamCreateWithFlags), REQUIRED(cudaStreamSynchronize),
    REQUIRED(cudaStreamQuery), REQUIRED(cudaStreamDestroy), REQUIRED(cudaStreamWaitEvent),
    REQUIRED(cudaEventCreateWithFlags), REQUIRED(cudaEventRecord), REQUIRED(cudaEventElapsedTime),
    REQUIRED(cudaEventDestroy), REQUIRED(cudaDeviceSynchronize), REQUIRED(cudaDeviceCanAccessPeer),
    REQUIRED(cudaDeviceEnablePeerAccess), REQUIRED(cudaDeviceDisablePeerAccess),
    REQUIRED(cudaDeviceGetP2PAttribute), REQUIRED(cudaLaunchHostFunc),
};

int gb_load(const char *path, char *err, size_t errlen) {
  if (T.loaded) return 1;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(err, errlen, "%s", dlerror());
    return 0;
  }
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    dlerror();
    *required[i].slot = dlsym(h, required[i].name);
    if (!*required[i].slot) {
      snprintf(err, errlen, "%s: missing symbol %s", path, required[i].name);
      dlclose(h);
      memset(&T, 0, sizeof T);
      return 0;
    }
  }
  // cudaDeviceProp's layout changed between majors, but its first field is char name[256] in every
  // one; 12.x exports the current layout as _v2 and 11.x and 13.x as the plain name. Only the name
  // is read, into a buffer larger than any layout.
  int rt = 0;
  T.cudaRuntimeGetVersion(&rt);
  T.getDeviceProperties = (cudaError_t(*)(void *, int))dlsym(h, rt / 1000 == 12 ? "cudaGetDeviceProperties_v2" : "cudaGetDeviceProperties");
  T.handle = h;
  T.loaded = 1;
  return 1;
}

void gb_unload(void) {
  if (T.loaded) dlclose(T.handle);
  memset(&T, 0, sizeof T);
}

const char *gb_error_name(int code) {
  switch (code) {
  case GB_ERR_GATE: return "gbErrorGateExpired";
  case GB_ERR_NOT_LOADED: return "gbErrorNotLoaded";
  case GB_ERR_NO_SYMBOL: return "gbErrorNoSymbol";
  case GB_ERR_TIMEOUT: return "gbErrorTimeout";
  case GB_ERR_NO_MEMORY: return "gbErrorNoHostMemory";
  }
  return T.loaded ? T.cudaGetErrorName(code) : "unknown";
}

const char *gb_error_string(int code) {
  switch (code) {
  case GB_ERR_NOT_LOADED: return "the CUDA runtime library is not loaded";
  case GB_ERR_NO_SYMBOL: return "the loaded CUDA runtime lacks this entry point";
  case GB_ERR_TIMEOUT: return "copies did not finish within the timeout";
  case GB_ERR_NO_MEMORY: return "out of host memory";
  case GB_ERR_GATE: return "the copies could not all be enqueued within 10 s of the gate closing; use fewer --repeat";
  }
  return T.loaded ? T.cudaGetErrorString(code) : "unknown";
}

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != cudaSuccess) return rc_;                                                            \
  } while (0)
#define LOADED()                                                                                   \
  do {                                                                                             \
    if (!T.loaded) return GB_ERR_NOT_LOADED;                                                       \
  } while (0)

int gb_versions(int *driver, int *runtime) {
  LOADED();
  CHECK(T.cudaDriverGetVersion(driver));
  return T.cudaRuntimeGetVersion(runtime);
}

int gb_device_count(int *n) {
  LOADED();
  return T.cudaGetDeviceCount(n);
}

/* CHECK_NAMED is CHECK that also says, through *failed, which call failed. */
#define CHECK_NAMED(call, fn)                                                                      \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != cudaSuccess) {                                                                      \
      *failed = fn;                                                                                \
      return rc_;                                                                                  \
    }                                                                                              \
  } while (0)

int gb_device_info(int dev, char *name, size_t namelen, char *busid, size_t buslen, int *cc_major,
                   int *cc_minor, size_t *total_mem, const char **failed) {
  *failed = "libcudart";
  LOADED();
  CHECK_NAMED(T.cudaSetDevice(dev), "cudaSetDevice");
  CHECK_NAMED(T.cudaDeviceGetPCIBusId(busid, (int)buslen, dev), "cudaDeviceGetPCIBusId");
  CHECK_NAMED(T.cudaDeviceGetAttribute(cc_major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  CHECK_NAMED(T.cudaDeviceGetAttribute(cc_minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  size_t free_bytes;
  CHECK_NAMED(T.cudaMemGetInfo(&free_bytes, total_mem), "cudaMemGetInfo");
  name[0] = 0;
  if (T.getDeviceProperties) {
    char *props = calloc(1, 16384);
    if (!props) return GB_ERR_NO_MEMORY;
    if (T.getDeviceProperties(props, dev) == cudaSuccess) snprintf(name, namelen, "%.255s", props);
    else T.cudaGetLastError();
    free(props);
  }
  return cudaSuccess;
}

int gb_mem_info(int dev, size_t *free_bytes, size_t *total_bytes) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  return T.cudaMemGetInfo(free_bytes, total_bytes);
}

int gb_malloc(int dev, void **p, size_t n) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  return T.cudaMalloc(p, n);
}

int gb_free(int dev, void *p) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  return T.cudaFree(p);
}

// parse_cpus reads a Linux CPU list ("0-3,8,10-11") into set; it returns 0 when nothing parses.
static int parse_cpus(const char *s, cpu_set_t *set) {
  CPU_ZERO(set);
  int any = 0;
  while (*s) {
    char *end;
    long lo = strtol(s, &end, 10), hi = lo;
    if (end == s) return 0;
    if (*end == '-') {
      s = end + 1;
      hi = strtol(s, &end, 10);
      if (end == s) return 0;
    }
    for (long c = lo; c <= hi && c < CPU_SETSIZE; c++) {
      if (c >= 0) CPU_SET(c, set), any = 1;
    }
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return 0;
  }
  return any;
}

int gb_host_alloc(const char *cpus, void **p, size_t n) {
  LOADED();
  cpu_set_t want, old;
  int moved = parse_cpus(cpus, &want) && sched_getaffinity(0, sizeof old, &old) == 0 &&
              sched_setaffinity(0, sizeof want, &want) == 0;
  int rc = T.cudaHostAlloc(p, n, cudaHostAllocPortable);
  if (rc == cudaSuccess) memset(*p, 0, n); // first touch: the pages land on this thread's node
  if (moved) sched_setaffinity(0, sizeof old, &old);
  return rc;
}

int gb_free_host(void *p) {
  LOADED();
  return T.cudaFreeHost(p);
}

// cudaMemset and a pageable cudaMemcpy to the device may still be running when they return, on
// the legacy stream, which gpubench's non-blocking streams do not wait for: wait for the device.
int gb_memset(int dev, void *p, int v, size_t n) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  CHECK(T.cudaMemset(p, v, n));
  return T.cudaDeviceSynchronize();
}

int gb_copy_to_device(int dev, void *dst, const void *src, size_t n) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  CHECK(T.cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  return T.cudaDeviceSynchronize();
}

int gb_copy_from_device(int dev, void *dst, const void *src, size_t n) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  return T.cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
}

int gb_can_access_peer(int dev, int peer, int *can) {
  LOADED();
  return T.cudaDeviceCanAccessPeer(can, dev, peer);
}

int gb_p2p_attr(int dev, int peer, int attr, int *value) {
  LOADED();
  return T.cudaDeviceGetP2PAttribute(value, attr, dev, peer);
}

int gb_enable_peer(int dev, int peer) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  int rc = T.cudaDeviceEnablePeerAccess(peer, 0);
  if (rc != cudaSuccess) T.cudaGetLastError(); // the error is sticky until read
  return rc;
}

int gb_disable_peer(int dev, int peer) {
  LOADED();
  CHECK(T.cudaSetDevice(dev));
  int rc = T.cudaDeviceDisablePeerAccess(peer);
  if (rc != cudaSuccess) T.cudaGetLastError();
  return rc;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// The gate: a host function on one stream that returns once the shim opens it (or at its
// deadline), and an event after it that every copy stream waits on. No kernel is needed.
typedef struct {
  int open, expired;
  long long deadline_ns;
} gate;

// The gate gives up after 10 s, as nvbandwidth's spin kernel does: enqueueing can block when too
// much work queues behind it, and that must not pass for a hang of the measured copies.
#define GATE_NS 10000000000LL

static void gate_wait(void *p) {
  gate *g = p;
  struct timespec pause = {0, 1000};
  while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE)) {
    if (now_ns() > g->deadline_ns) {
      __atomic_store_n(&g->expired, 1, __ATOMIC_RELEASE);
      return;
    }
    nanosleep(&pause, NULL);
  }
}

static int enqueue_copy(const gb_copy *c, cudaStream_t s) {
  if (c->dst_dev >= 0 && c->src_dev >= 0 && c->dst_dev != c->src_dev)
    return T.cudaMemcpyPeerAsync(c->dst, c->dst_dev, c->src, c->src_dev, c->bytes, s);
  int kind = c->src_dev < 0 ? cudaMemcpyHostToDevice : c->dst_dev < 0 ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  return T.cudaMemcpyAsync(c->dst, c->src, c->bytes, kind, s);
}

// wait_all polls every stream until all are idle, an error shows, or the deadline passes.
static int wait_all(int n, cudaStream_t *s, long long deadline_ns) {
  struct timespec pause = {0, 20000};
  for (;;) {
    int busy = 0;
    for (int i = 0; i < n; i++) {
      if (!s[i]) continue;
      int rc = T.cudaStreamQuery(s[i]);
      if (rc == cudaErrorNotReady) busy = 1;
      else if (rc != cudaSuccess) return rc;
    }
    if (!busy) return cudaSuccess;
    if (now_ns() > deadline_ns) return GB_ERR_TIMEOUT;
    nanosleep(&pause, NULL);
  }
}

int gb_timed_copies(int n, const gb_copy *c, float *ms, int timeout_ms) {
  LOADED();
  if (n <= 0) return cudaSuccess;
  // Streams: the gate's at index n, the copies' at 0..n-1. Events likewise.
  cudaStream_t *s = calloc(n + 1, sizeof *s);
  cudaEvent_t *start = calloc(n + 1, sizeof *start), *stop = calloc(n, sizeof *stop);
  gate *g = calloc(1, sizeof *g);
  if (!s || !start || !stop || !g) {
    free(s), free(start), free(stop), free(g);
    return GB_ERR_NO_MEMORY;
  }
  long long deadline = now_ns() + (long long)timeout_ms * 1000000LL;
  g->deadline_ns = now_ns() + GATE_NS;
  int rc = T.cudaSetDevice(c[0].issuer);
  if (!rc) rc = T.cudaStreamCreateWithFlags(&s[n], cudaStreamNonBlocking);
  if (!rc) rc = T.cudaEventCreateWithFlags(&start[n], cudaEventDisableTiming);
  if (!rc) rc = T.cudaLaunchHostFunc(s[n], gate_wait, g);
  if (!rc) rc = T.cudaEventRecord(start[n], s[n]);
  for (int i = 0; i < n && !rc; i++) {
    rc = T.cudaSetDevice(c[i].issuer);
    if (!rc) rc = T.cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
    if (!rc) rc = T.cudaEventCreateWithFlags(&start[i], 0);
    if (!rc) rc = T.cudaEventCreateWithFlags(&stop[i], 0);
    if (!rc) rc = T.cudaStreamWaitEvent(s[i], start[n], 0);
    if (!rc) rc = T.cudaEventRecord(start[i], s[i]);
    for (int r = 0; r < c[i].repeat && !rc; r++) rc = enqueue_copy(&c[i], s[i]);
    if (!rc) rc = T.cudaEventRecord(stop[i], s[i]);
  }
  __atomic_store_n(&g->open, 1, __ATOMIC_RELEASE);
  int waited = wait_all(n + 1, s, deadline);
  if (waited == GB_ERR_TIMEOUT) return GB_ERR_TIMEOUT; // the streams still use g: leak them
  if (!rc) rc = waited;
  if (!rc && __atomic_load_n(&g->expired, __ATOMIC_ACQUIRE)) rc = GB_ERR_GATE;
  for (int i = 0; i < n && !rc; i++) rc = T.cudaEventElapsedTime(&ms[i], start[i], stop[i]);
  for (int i = 0; i <= n; i++) {
    T.cudaSetDevice(c[i < n ? i : 0].issuer); // destroy each on its own device
    if (s[i]) T.cudaStreamDestroy(s[i]);
    if (start[i]) T.cudaEventDestroy(start[i]);
    if (i < n && stop[i]) T.cudaEventDestroy(stop[i]);
  }
  if (rc) T.cudaGetLastError();
  free(s), free(start), free(stop), free(g);
  return rc;
}
