/*
 * cudart_standin.c: a TEST DOUBLE of the CUDA runtime for gpubench's tests. It is NOT CUDA.
 *
 * It implements, on host memory and host threads, the subset of libcudart that gpubench's
 * internal/cuda binding calls, so that the binding can be exercised in CI machines without a GPU.
 * gpubench never loads this library unless a test (or a user) points it at it explicitly.
 *
 * What it models: N fake devices; a current device per host thread; allocations tagged with their
 * device (real host memory, counted against a per-device budget); peer access per ordered pair;
 * streams as FIFO queues each drained by its own worker thread, which stream capture turns into
 * graphs that each launch queues anew; events with CLOCK_MONOTONIC
 * timestamps; the sticky per-thread last error. It fails where real CUDA fails for the misuses
 * gpubench must not make (wrong current device, peer access enabled twice or not enabled, an
 * event recorded on another device's stream), and in a few places it is deliberately stricter
 * than CUDA; csrc/README.md lists those.
 *
 * Environment (read once, at the first call):
 *   GPUBENCH_STANDIN_DEVICES    number of devices, 0..64 (default 2)
 *   GPUBENCH_STANDIN_MEMORY     bytes of memory per device (default 1 GiB)
 *   GPUBENCH_STANDIN_NO_P2P     pairs without peer access, e.g. "0-1,2-3" (both directions)
 *   GPUBENCH_STANDIN_COPY_GBPS  if > 0, asynchronous copies take bytes/(GBPS*1e9) s at least
 *   GPUBENCH_STANDIN_NAME       every device's name, read at each call (default "gpubench stand-in device N")
 *
 * It also exports three helpers that are not CUDA API, for the stand-in NCCL (nccl_standin.c):
 * gpubenchStandinStreamDevice, gpubenchStandinPointerDevice and gpubenchStandinPointerRange.
 *
 * Plain C11 + POSIX threads; no CUDA header is used: every type is declared below.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Types and constants (values of CUDA's driver_types.h, CUDA Runtime API reference) ------ */

typedef int cudaError_t; /* enum cudaError: int-sized */
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorPeerAccessUnsupported = 217,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorPeerAccessNotEnabled = 705,
    cudaErrorStreamCaptureUnsupported = 900,
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraph_st *cudaGraphExec_t; /* CUDA's is struct CUgraphExec_st: the same here */
typedef void (*cudaHostFn_t)(void *userData);

enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT_KIND = 4 }; /* cudaMemcpyKind */
#define STREAM_NON_BLOCKING 0x1u
#define EVENT_DISABLE_TIMING 0x2u
#define MAXDEV 64

/* ---- State --------------------------------------------------------------------------------- */

enum { MEM_ANY = 0, MEM_DEVICE = 1, MEM_HOST = 2 };

struct alloc { /* one cudaMalloc / cudaHostAlloc block */
    char *base;
    size_t size;
    int dev;  /* device ordinal, or -1 for pinned host memory */
    int kind; /* MEM_DEVICE or MEM_HOST */
    struct alloc *next;
};

enum { OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_HOSTFN };
struct op { /* one item of a stream's queue */
    int type;
    void *dst;
    const void *src;
    size_t n;
    int val;
    int throttle;          /* OP_COPY: honour GPUBENCH_STANDIN_COPY_GBPS */
    struct CUevent_st *ev; /* OP_RECORD, OP_WAIT: holds a reference */
    uint64_t seq;          /* the event's record number to complete / wait for */
    cudaHostFn_t fn;
    void *data;
    struct op *next;
};

/* A stream's captured work (cudaStreamBeginCapture to cudaStreamEndCapture), and what
 * cudaGraphInstantiateWithFlags makes of it: copies of the ops, which cudaGraphLaunch queues anew
 * at every launch. Only copies, memsets and host functions are captured. */
struct CUgraph_st {
    int dev;
    size_t n, cap;
    struct op *ops;
};

struct CUstream_st {
    int dev;
    unsigned flags;
    struct CUgraph_st *capture; /* under mu: the graph being captured, or NULL */
    int refs, dead; /* under g_lock: callers using it outside g_lock; destroyed */
    pthread_t thread;
    pthread_mutex_t mu; /* guards the queue */
    pthread_cond_t work, idle;
    struct op *head, *tail; /* head stays queued while it runs: empty queue == idle */
    int stop;
    struct CUstream_st *next; /* registry, under g_lock */
};

struct CUevent_st { /* every field under g_lock */
    int dev;
    unsigned flags;
    int refs;                /* the registry holds one reference; queued ops hold one each */
    uint64_t recorded;       /* number of the latest cudaEventRecord */
    uint64_t completed;      /* highest record number the worker has reached */
    struct timespec when;    /* when `completed` was reached */
    struct CUevent_st *next; /* registry */
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ndev = 2;
static size_t g_mem = (size_t)1 << 30;
static double g_gbps;
static unsigned char g_nop2p[MAXDEV][MAXDEV];

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* registries, peers, events */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;     /* event progress, refs dropping */
static struct alloc *g_allocs;
static size_t g_used[MAXDEV];
static unsigned char g_peer[MAXDEV][MAXDEV]; /* [current][peer]: enabled */
static struct CUstream_st *g_streams;
static struct CUevent_st *g_events;

static _Thread_local int t_dev;         /* current device of this host thread */
static _Thread_local cudaError_t t_err; /* sticky last error of this host thread */

/* ---- Helpers ------------------------------------------------------------------------------- */

/* Every API return goes through ret(): a failure becomes the thread's last error. NotReady is
 * a status, not an error, and real CUDA does not make it sticky either. */
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess && e != cudaErrorNotReady) t_err = e;
    return e;
}

static unsigned long long env_num(const char *name, unsigned long long def, unsigned long long max) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > max || s[0] == '-') {
        fprintf(stderr, "cudart_standin: ignoring %s=%s (want an integer <= %llu)\n", name, s, max);
        return def;
    }
    return v;
}

static void init_env(void) {
    g_ndev = (int)env_num("GPUBENCH_STANDIN_DEVICES", 2, MAXDEV);
    g_mem = (size_t)env_num("GPUBENCH_STANDIN_MEMORY", (size_t)1 << 30, SIZE_MAX / 2);
    const char *gb = getenv("GPUBENCH_STANDIN_COPY_GBPS");
    if (gb && *gb) g_gbps = strtod(gb, NULL);
    const char *np = getenv("GPUBENCH_STANDIN_NO_P2P");
    if (np && *np) {
        char *copy = strdup(np), *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
            int a, b, used = 0;
            if (sscanf(tok, " %d-%d %n", &a, &b, &used) == 2 && tok[used] == '\0' && a >= 0 &&
                b >= 0 && a < MAXDEV && b < MAXDEV)
                g_nop2p[a][b] = g_nop2p[b][a] = 1;
            else
                fprintf(stderr, "cudart_standin: ignoring GPUBENCH_STANDIN_NO_P2P entry '%s'\n", tok);
        }
        free(copy);
    }
}

static void init(void) { pthread_once(&g_once, init_env); }
static int valid_dev(int d) { return d >= 0 && d < g_ndev; }
static int can_p2p(int a, int b) { return a != b && !g_nop2p[a][b]; }

/* The block containing p, or NULL (g_lock held). */
static struct alloc *alloc_find(const void *p) {
    uintptr_t x = (uintptr_t)p;
    for (struct alloc *a = g_allocs; a; a = a->next)
        if (x >= (uintptr_t)a->base && x < (uintptr_t)a->base + a->size) return a;
    return NULL;
}

/* Checks that [p, p+n) can be one side of a copy that wants `want` memory (MEM_HOST accepts
 * pinned blocks and any unregistered, i.e. pageable, pointer). A registered range must fit in
 * its block. *dev gets the device of a device pointer, else -1. g_lock held. */
static cudaError_t check_ptr(const void *p, size_t n, int want, int *dev) {
    struct alloc *a = alloc_find(p);
    *dev = -1;
    if (!p) return cudaErrorInvalidValue;
    if (!a) return want == MEM_DEVICE ? cudaErrorInvalidValue : cudaSuccess;
    if ((want != MEM_ANY && a->kind != want) || n > a->size - (size_t)((const char *)p - a->base))
        return cudaErrorInvalidValue;
    if (a->kind == MEM_DEVICE) *dev = a->dev;
    return cudaSuccess;
}

/* Validates a copy of `kind` (g_lock held); ddev and sdev as in check_ptr. */
static cudaError_t check_copy(void *dst, const void *src, size_t n, int kind, int *ddev, int *sdev) {
    static const int want_dst[5] = {MEM_HOST, MEM_DEVICE, MEM_HOST, MEM_DEVICE, MEM_ANY};
    static const int want_src[5] = {MEM_HOST, MEM_HOST, MEM_DEVICE, MEM_DEVICE, MEM_ANY};
    if (kind < 0 || kind > DEFAULT_KIND) return cudaErrorInvalidValue;
    cudaError_t e = check_ptr(dst, n, want_dst[kind], ddev);
    return e ? e : check_ptr(src, n, want_src[kind], sdev);
}

static struct timespec now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) { /* interrupted: sleep the rest */
    }
}

/* ---- Streams, events and their worker threads ---------------------------------------------- */

static struct CUstream_st *stream_find(cudaStream_t s) { /* g_lock held */
    for (struct CUstream_st *x = g_streams; x; x = x->next)
        if (x == s) return x;
    return NULL;
}

static struct CUevent_st *event_find(cudaEvent_t e) { /* g_lock held */
    for (struct CUevent_st *x = g_events; x; x = x->next)
        if (x == e) return x;
    return NULL;
}

/* Takes a reference to a live stream so that it can be used without g_lock; NULL if the handle
 * is not a live stream. Stream 0, cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2) are never
 * live streams here, so they get cudaErrorInvalidResourceHandle: gpubench never uses them. */
static struct CUstream_st *stream_get(cudaStream_t s) {
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *x = stream_find(s);
    if (x) x->refs++;
    pthread_mutex_unlock(&g_lock);
    return x;
}

static void stream_put_locked(struct CUstream_st *s) {
    if (--s->refs == 0 && s->dead) pthread_cond_broadcast(&g_cv);
}

static void stream_put(struct CUstream_st *s) {
    pthread_mutex_lock(&g_lock);
    stream_put_locked(s);
    pthread_mutex_unlock(&g_lock);
}

static void event_put_locked(struct CUevent_st *e) {
    if (--e->refs == 0) free(e);
}

static void stream_wait_idle(struct CUstream_st *s) {
    pthread_mutex_lock(&s->mu);
    while (s->head) pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until every stream of the devices in `mask` has drained; with blocking_only, only the
 * streams created without cudaStreamNonBlocking (those the legacy default stream syncs with). */
static void sync_streams(uint64_t mask, int blocking_only) {
    pthread_mutex_lock(&g_lock);
    size_t n = 0, i = 0;
    for (struct CUstream_st *s = g_streams; s; s = s->next)
        n++;
    struct CUstream_st **list = malloc((n ? n : 1) * sizeof *list);
    for (struct CUstream_st *s = g_streams; list && s; s = s->next)
        if ((mask >> s->dev & 1) && !(blocking_only && (s->flags & STREAM_NON_BLOCKING))) {
            s->refs++;
            list[i++] = s;
        }
    pthread_mutex_unlock(&g_lock);
    for (size_t k = 0; k < i; k++)
        stream_wait_idle(list[k]);
    pthread_mutex_lock(&g_lock);
    for (size_t k = 0; k < i; k++)
        stream_put_locked(list[k]);
    pthread_mutex_unlock(&g_lock);
    free(list);
}

#define DEV_BIT(d) ((uint64_t)1 << (d))
#define ALL_DEVS (~(uint64_t)0)

static void run_op(struct op *o) {
    switch (o->type) {
    case OP_COPY: {
        struct timespec t0 = now();
        memmove(o->dst, o->src, o->n);
        if (o->throttle && g_gbps > 0) {
            struct timespec t1 = now();
            double spent = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            sleep_s((double)o->n / (g_gbps * 1e9) - spent);
        }
        break;
    }
    case OP_SET:
        memset(o->dst, o->val, o->n);
        break;
    case OP_RECORD:
        pthread_mutex_lock(&g_lock);
        if (o->seq > o->ev->completed) { /* a later record may have completed on another stream */
            o->ev->completed = o->seq;
            o->ev->when = now();
        }
        event_put_locked(o->ev);
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_lock);
        break;
    case OP_WAIT:
        pthread_mutex_lock(&g_lock);
        while (o->ev->completed < o->seq) pthread_cond_wait(&g_cv, &g_lock);
        event_put_locked(o->ev);
        pthread_mutex_unlock(&g_lock);
        break;
    case OP_HOSTFN:
        o->fn(o->data);
        break;
    }
}

static void *worker(void *arg) {
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        if (!s->head)
            break; /* stopped and drained */
        struct op *o = s->head;
        pthread_mutex_unlock(&s->mu);
        run_op(o);
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (!s->head) {
            s->tail = NULL;
            pthread_cond_broadcast(&s->idle);
        }
        free(o);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Appends op to graph g; 0 when out of memory. */
static int graph_add(struct CUgraph_st *g, const struct op *op) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        struct op *x = realloc(g->ops, cap * sizeof *x);
        if (!x) return 0;
        g->ops = x, g->cap = cap;
    }
    g->ops[g->n] = *op;
    g->ops[g->n++].next = NULL;
    return 1;
}

static void graph_free(struct CUgraph_st *g) {
    if (g) free(g->ops);
    free(g);
}

/* Whether the stream is capturing: its work goes into a graph, and it cannot be waited for. */
static int capturing(struct CUstream_st *s) {
    pthread_mutex_lock(&s->mu);
    int c = s->capture != NULL;
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* Appends a copy of *tmpl to the stream's queue, or to its graph while it captures (the caller
 * holds a stream reference). */
static cudaError_t enqueue(struct CUstream_st *s, const struct op *tmpl) {
    pthread_mutex_lock(&s->mu);
    if (s->capture) {
        int ok = graph_add(s->capture, tmpl);
        pthread_mutex_unlock(&s->mu);
        return ok ? cudaSuccess : cudaErrorMemoryAllocation;
    }
    pthread_mutex_unlock(&s->mu);
    struct op *o = malloc(sizeof *o);
    if (!o) return cudaErrorMemoryAllocation;
    *o = *tmpl;
    o->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

/* ---- Version, errors ----------------------------------------------------------------------- */

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return ret(cudaErrorInvalidValue);
    *v = 12040;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return ret(cudaErrorInvalidValue);
    *v = 12040;
    return cudaSuccess;
}

static const struct {
    cudaError_t code;
    const char *name, *text;
} errtab[] = {
    {0, "cudaSuccess", "no error"},
    {1, "cudaErrorInvalidValue", "invalid argument"},
    {2, "cudaErrorMemoryAllocation", "out of memory"},
    {3, "cudaErrorInitializationError", "initialization error"},
    {35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"},
    {100, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {101, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {217, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices"},
    {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {401, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {600, "cudaErrorNotReady", "device not ready"},
    {700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {999, "cudaErrorUnknown", "unknown error"},
};

const char *cudaGetErrorName(cudaError_t e) {
    for (size_t i = 0; i < sizeof errtab / sizeof errtab[0]; i++)
        if (errtab[i].code == e) return errtab[i].name;
    return "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t e) {
    for (size_t i = 0; i < sizeof errtab / sizeof errtab[0]; i++)
        if (errtab[i].code == e) return errtab[i].text;
    return "unrecognized error code";
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_err;
    t_err = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_err; }

/* ---- Devices ------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    init();
    if (!count) return ret(cudaErrorInvalidValue);
    *count = g_ndev;
    return ret(g_ndev ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev) {
    init();
    if (!g_ndev) return ret(cudaErrorNoDevice);
    if (!valid_dev(dev)) return ret(cudaErrorInvalidDevice);
    t_dev = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev) {
    init();
    if (!dev) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    *dev = t_dev;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned flags) {
    init();
    if (flags & ~0x1fu) return ret(cudaErrorInvalidValue);
    return ret(g_ndev ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaDeviceGetAttribute(int *value, int attr, int dev) {
    init();
    if (!value) return ret(cudaErrorInvalidValue);
    if (!valid_dev(dev)) return ret(cudaErrorInvalidDevice);
    switch (attr) {
    case 13: *value = 1980000; break;  /* ClockRate, kHz */
    case 16: *value = 132; break;      /* MultiProcessorCount */
    case 33: *value = 0x10 + dev; break; /* PciBusId */
    case 34: *value = 0; break;        /* PciDeviceId */
    case 36: *value = 2619000; break;  /* MemoryClockRate, kHz */
    case 37: *value = 5120; break;     /* GlobalMemoryBusWidth, bits */
    case 38: *value = 50 << 20; break; /* L2CacheSize, bytes */
    case 40: *value = 3; break;        /* AsyncEngineCount */
    case 41: *value = 1; break;        /* UnifiedAddressing */
    case 50: *value = 0; break;        /* PciDomainId */
    case 75: *value = 9; break;        /* ComputeCapabilityMajor */
    case 76: *value = 0; break;        /* ComputeCapabilityMinor */
    case 131: *value = 0; break;       /* NumaId */
    default: return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int dev) {
    init();
    if (!buf || len <= 0) return ret(cudaErrorInvalidValue);
    if (!valid_dev(dev)) return ret(cudaErrorInvalidDevice);
    snprintf(buf, (size_t)len, "0000:%02x:00.0", 0x10 + dev); /* truncated to len */
    return cudaSuccess;
}

/* cudaDeviceProp starts with char name[256]; only those 256 bytes are written. */
cudaError_t cudaGetDeviceProperties_v2(void *prop, int dev) {
    init();
    if (!prop) return ret(cudaErrorInvalidValue);
    if (!valid_dev(dev)) return ret(cudaErrorInvalidDevice);
    memset(prop, 0, 256);
    const char *name = getenv("GPUBENCH_STANDIN_NAME");
    if (name && *name) {
        snprintf(prop, 256, "%s", name); /* truncated to 255 bytes and the NUL */
    } else {
        snprintf(prop, 256, "gpubench stand-in device %d", dev);
    }
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(void *prop, int dev) { return cudaGetDeviceProperties_v2(prop, dev); }

cudaError_t cudaDeviceSynchronize(void) {
    init();
    if (!g_ndev) return ret(cudaErrorNoDevice);
    sync_streams(DEV_BIT(t_dev), 0);
    return cudaSuccess;
}

/* ---- Peer access --------------------------------------------------------------------------- */

cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer) {
    init();
    if (!can) return ret(cudaErrorInvalidValue);
    if (!valid_dev(dev) || !valid_dev(peer)) return ret(cudaErrorInvalidDevice);
    *can = can_p2p(dev, peer);
    return cudaSuccess;
}

/* Acts from the calling thread's current device; access is per ordered pair (current -> peer). */
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
    init();
    if (flags != 0) return ret(cudaErrorInvalidValue);
    if (!valid_dev(peer) || peer == t_dev) return ret(cudaErrorInvalidDevice);
    if (!can_p2p(t_dev, peer)) return ret(cudaErrorPeerAccessUnsupported);
    pthread_mutex_lock(&g_lock);
    cudaError_t e = g_peer[t_dev][peer] ? cudaErrorPeerAccessAlreadyEnabled : cudaSuccess;
    g_peer[t_dev][peer] = 1;
    pthread_mutex_unlock(&g_lock);
    return ret(e);
}

cudaError_t cudaDeviceDisablePeerAccess(int peer) {
    init();
    if (!valid_dev(peer) || peer == t_dev) return ret(cudaErrorInvalidDevice);
    pthread_mutex_lock(&g_lock);
    cudaError_t e = g_peer[t_dev][peer] ? cudaSuccess : cudaErrorPeerAccessNotEnabled;
    g_peer[t_dev][peer] = 0;
    pthread_mutex_unlock(&g_lock);
    return ret(e);
}

cudaError_t cudaDeviceGetP2PAttribute(int *value, int attr, int src, int dst) {
    init();
    if (!value) return ret(cudaErrorInvalidValue);
    if (!valid_dev(src) || !valid_dev(dst) || src == dst) return ret(cudaErrorInvalidDevice);
    switch (attr) {
    case 1: *value = 0; break;                  /* PerformanceRank */
    case 2: case 3: case 4: *value = can_p2p(src, dst); break; /* Access, NativeAtomic, CudaArray */
    default: return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* ---- Memory -------------------------------------------------------------------------------- */

/* Registers a new block of n bytes (256-aligned, as CUDA's) of `kind` on `dev`. Device memory
 * is reserved against the budget before anything is allocated, so an oversized request costs
 * nothing; fresh memory is filled with 0xcd (like device memory: not zero, not to rely on). */
static cudaError_t new_block(void **p, size_t n, int kind, int dev) {
    if (!p) return cudaErrorInvalidValue;
    *p = NULL;
    if (n == 0) return cudaSuccess; /* CUDA returns a NULL pointer for 0 bytes too */
    pthread_mutex_lock(&g_lock);
    int fits = kind != MEM_DEVICE || n <= g_mem - g_used[dev];
    if (fits && kind == MEM_DEVICE) g_used[dev] += n;
    pthread_mutex_unlock(&g_lock);
    if (!fits) return cudaErrorMemoryAllocation;
    size_t rounded = (n + 255) & ~(size_t)255;
    struct alloc *a = malloc(sizeof *a);
    char *base = rounded >= n ? aligned_alloc(256, rounded) : NULL;
    if (a && base) {
        memset(base, 0xcd, n);
        *a = (struct alloc){.base = base, .size = n, .dev = kind == MEM_DEVICE ? dev : -1, .kind = kind};
    }
    pthread_mutex_lock(&g_lock);
    if (a && base) {
        a->next = g_allocs;
        g_allocs = a;
    } else if (kind == MEM_DEVICE) {
        g_used[dev] -= n; /* give the reservation back */
    }
    pthread_mutex_unlock(&g_lock);
    if (!a || !base) {
        free(a);
        free(base);
        return cudaErrorMemoryAllocation;
    }
    *p = base;
    return cudaSuccess;
}

/* Frees the block that starts at p if it is of `kind`. Waits for every stream first (real
 * cudaFree/cudaFreeHost synchronize too) so that no queued copy touches freed memory. */
static cudaError_t free_block(void *p, int kind) {
    if (!p) return cudaSuccess;
    sync_streams(ALL_DEVS, 0);
    pthread_mutex_lock(&g_lock);
    struct alloc **pp = &g_allocs;
    while (*pp && !((*pp)->base == p && (*pp)->kind == kind)) pp = &(*pp)->next;
    struct alloc *a = *pp;
    if (a) {
        *pp = a->next;
        if (kind == MEM_DEVICE) g_used[a->dev] -= a->size;
    }
    pthread_mutex_unlock(&g_lock);
    if (!a) return cudaErrorInvalidValue;
    free(a->base);
    free(a);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    init();
    if (!g_ndev) return ret(cudaErrorNoDevice);
    return ret(new_block(p, n, MEM_DEVICE, t_dev));
}

cudaError_t cudaFree(void *p) {
    init();
    return ret(free_block(p, MEM_DEVICE));
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    init();
    if (flags & ~0xfu) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    return ret(new_block(p, n, MEM_HOST, -1));
}

cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaFreeHost(void *p) {
    init();
    return ret(free_block(p, MEM_HOST));
}

cudaError_t cudaMemGetInfo(size_t *freeb, size_t *total) {
    init();
    if (!freeb || !total) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    pthread_mutex_lock(&g_lock);
    *total = g_mem;
    *freeb = g_mem - g_used[t_dev];
    pthread_mutex_unlock(&g_lock);
    return cudaSuccess;
}

/* Synchronous memset: any device's pointer (UVA), never host memory. Like the legacy default
 * stream, it first waits for the blocking streams of the current device. */
cudaError_t cudaMemset(void *p, int value, size_t n) {
    init();
    if (!g_ndev) return ret(cudaErrorNoDevice);
    if (n == 0) return cudaSuccess;
    int dev;
    pthread_mutex_lock(&g_lock);
    cudaError_t e = check_ptr(p, n, MEM_DEVICE, &dev);
    pthread_mutex_unlock(&g_lock);
    if (e) return ret(e);
    sync_streams(DEV_BIT(t_dev), 1);
    memset(p, value, n);
    return cudaSuccess;
}

/* Synchronous copy; `kind` must match the pointers (see check_copy). Works between any two
 * devices, with or without peer access (CUDA stages through the host). Waits first for the
 * blocking streams of the current device, as the legacy default stream does. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    init();
    if (n == 0) return kind >= 0 && kind <= DEFAULT_KIND ? cudaSuccess : ret(cudaErrorInvalidValue);
    int ddev, sdev;
    pthread_mutex_lock(&g_lock);
    cudaError_t e = check_copy(dst, src, n, kind, &ddev, &sdev);
    pthread_mutex_unlock(&g_lock);
    if (e) return ret(e);
    if (g_ndev) sync_streams(DEV_BIT(t_dev), 1);
    memmove(dst, src, n);
    return cudaSuccess;
}

/* Checks a peer copy: dst must be device memory of dstDev and src of srcDev. */
static cudaError_t check_peer_copy(void *dst, int dd, const void *src, int sd, size_t n) {
    if (!valid_dev(dd) || !valid_dev(sd)) return cudaErrorInvalidDevice;
    int d1, d2;
    pthread_mutex_lock(&g_lock);
    cudaError_t e = check_ptr(dst, n, MEM_DEVICE, &d1);
    if (!e) e = check_ptr(src, n, MEM_DEVICE, &d2);
    if (!e && (d1 != dd || d2 != sd)) e = cudaErrorInvalidValue;
    pthread_mutex_unlock(&g_lock);
    return e;
}

/* Synchronous peer copy, serialized with all work of the current, source and target devices. */
cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) {
    init();
    cudaError_t e = n ? check_peer_copy(dst, dd, src, sd, n) : cudaSuccess;
    if (e || n == 0) return ret(e);
    sync_streams(DEV_BIT(t_dev) | DEV_BIT(dd) | DEV_BIT(sd), 0);
    memmove(dst, src, n);
    return cudaSuccess;
}

/* Asynchronous copy. Checks, in order: the stream is live (else 400); the current device is the
 * stream's device (else 400: see README, stricter than CUDA); kind matches the pointers (else 1);
 * every device pointer is on the stream's device or on a device the stream's device has enabled
 * peer access to (else 705). */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t stream) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = cudaSuccess;
    if (s->dev != t_dev) {
        e = cudaErrorInvalidResourceHandle;
    } else if (kind < 0 || kind > DEFAULT_KIND) {
        e = cudaErrorInvalidValue;
    } else if (n > 0) {
        int ddev, sdev;
        pthread_mutex_lock(&g_lock);
        e = check_copy(dst, src, n, kind, &ddev, &sdev);
        if (!e && ((ddev >= 0 && ddev != s->dev && !g_peer[s->dev][ddev]) ||
                   (sdev >= 0 && sdev != s->dev && !g_peer[s->dev][sdev])))
            e = cudaErrorPeerAccessNotEnabled;
        pthread_mutex_unlock(&g_lock);
        if (!e)
            e = enqueue(s, &(struct op){.type = OP_COPY, .dst = dst, .src = src, .n = n, .throttle = 1});
    }
    stream_put(s);
    return ret(e);
}

/* Asynchronous peer copy: needs no peer access and no particular current device. */
cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t stream) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = n ? check_peer_copy(dst, dd, src, sd, n) : cudaSuccess;
    if (!e && n)
        e = enqueue(s, &(struct op){.type = OP_COPY, .dst = dst, .src = src, .n = n, .throttle = 1});
    stream_put(s);
    return ret(e);
}

/* Asynchronous memset: the current device must be the stream's (400); any device pointer (1). */
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t stream) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = cudaSuccess;
    if (s->dev != t_dev) {
        e = cudaErrorInvalidResourceHandle;
    } else if (n > 0) {
        int dev;
        pthread_mutex_lock(&g_lock);
        e = check_ptr(p, n, MEM_DEVICE, &dev);
        pthread_mutex_unlock(&g_lock);
        if (!e) e = enqueue(s, &(struct op){.type = OP_SET, .dst = p, .n = n, .val = value});
    }
    stream_put(s);
    return ret(e);
}

/* ---- Streams ------------------------------------------------------------------------------- */

/* The stream belongs to the current device, as in CUDA (which binds it to the current context). */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags) {
    init();
    if (!out || (flags & ~STREAM_NON_BLOCKING)) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return ret(cudaErrorMemoryAllocation);
    s->dev = t_dev;
    s->flags = flags;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->idle);
        free(s);
        return ret(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&g_lock);
    s->next = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_lock);
    *out = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, 0); }

/* Unregisters the stream at once (later calls with it get 400), then lets queued work finish
 * and joins the worker thread. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    init();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st **pp = &g_streams;
    while (*pp && *pp != stream) pp = &(*pp)->next;
    struct CUstream_st *s = *pp;
    if (!s) {
        pthread_mutex_unlock(&g_lock);
        return ret(cudaErrorInvalidResourceHandle);
    }
    *pp = s->next;
    s->dead = 1;
    while (s->refs > 0) /* other threads in the middle of a call on it */
        pthread_cond_wait(&g_cv, &g_lock);
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->idle);
    graph_free(s->capture); /* destroyed while capturing: the capture is gone with it */
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = capturing(s) ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
    if (!e) stream_wait_idle(s);
    stream_put(s);
    return ret(e);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    cudaError_t e = s->capture ? cudaErrorStreamCaptureUnsupported : s->head ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&s->mu);
    stream_put(s);
    return ret(e);
}

/* fn(data) runs on the stream's worker thread, in order; it may block (only this stream waits). */
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *data) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = fn ? enqueue(s, &(struct op){.type = OP_HOSTFN, .fn = fn, .data = data})
                       : cudaErrorInvalidValue;
    stream_put(s);
    return ret(e);
}

/* ---- Graphs: stream capture --------------------------------------------------------------- */

/* Work queued on a capturing stream goes into its graph instead of running (enqueue); any
 * capture mode is taken, and only the stream itself is captured (no event joins other streams). */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode) {
    init();
    if (mode < 0 || mode > 2) return ret(cudaErrorInvalidValue);
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = cudaSuccess;
    struct CUgraph_st *g = calloc(1, sizeof *g);
    pthread_mutex_lock(&s->mu);
    if (!g) {
        e = cudaErrorMemoryAllocation;
    } else if (s->capture) { /* capturing already */
        e = cudaErrorIllegalState;
    } else {
        g->dev = s->dev;
        s->capture = g;
        g = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(g);
    stream_put(s);
    return ret(e);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    init();
    if (!graph) return ret(cudaErrorInvalidValue);
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    struct CUgraph_st *g = s->capture;
    s->capture = NULL;
    pthread_mutex_unlock(&s->mu);
    stream_put(s);
    if (!g) return ret(cudaErrorIllegalState);
    *graph = g;
    return cudaSuccess;
}

/* status: 0 none, 1 active (cudaStreamCaptureStatus). */
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, int *status) {
    init();
    if (!status) return ret(cudaErrorInvalidValue);
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    *status = capturing(s);
    stream_put(s);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    init();
    if (!exec || !graph || flags) return ret(cudaErrorInvalidValue);
    struct CUgraph_st *x = calloc(1, sizeof *x);
    if (!x) return ret(cudaErrorMemoryAllocation);
    x->dev = graph->dev;
    for (size_t i = 0; i < graph->n; i++)
        if (!graph_add(x, &graph->ops[i])) {
            graph_free(x);
            return ret(cudaErrorMemoryAllocation);
        }
    *exec = x;
    return cudaSuccess;
}

/* Queues the graph's work on the stream, in the order it was captured. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    init();
    if (!exec) return ret(cudaErrorInvalidValue);
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = s->dev != exec->dev ? cudaErrorInvalidValue : cudaSuccess;
    for (size_t i = 0; i < exec->n && !e; i++)
        e = enqueue(s, &exec->ops[i]);
    stream_put(s);
    return ret(e);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    init();
    if (!exec) return ret(cudaErrorInvalidValue);
    graph_free(exec);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    init();
    if (!graph) return ret(cudaErrorInvalidValue);
    graph_free(graph);
    return cudaSuccess;
}

/* ---- Events -------------------------------------------------------------------------------- */

/* The event belongs to the current device. Flags: BlockingSync 1, DisableTiming 2,
 * Interprocess 4 (accepted, meaningless here). */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags) {
    init();
    if (!out || (flags & ~0x7u)) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return ret(cudaErrorMemoryAllocation);
    e->dev = t_dev;
    e->flags = flags;
    e->refs = 1; /* the registry's */
    pthread_mutex_lock(&g_lock);
    e->next = g_events;
    g_events = e;
    pthread_mutex_unlock(&g_lock);
    *out = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }

/* Unregisters the event; its memory lives on until queued records/waits that use it have run. */
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    init();
    pthread_mutex_lock(&g_lock);
    struct CUevent_st **pp = &g_events;
    while (*pp && *pp != event) pp = &(*pp)->next;
    struct CUevent_st *e = *pp;
    if (e) {
        *pp = e->next;
        event_put_locked(e);
    }
    pthread_mutex_unlock(&g_lock);
    return ret(e ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

/* The event and the stream must belong to the same device (else 400), as in CUDA. The current
 * device does not matter. */
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find(event);
    struct op o = {.type = OP_RECORD, .ev = e};
    cudaError_t err = cudaSuccess;
    if (!e || e->dev != s->dev) {
        err = cudaErrorInvalidResourceHandle;
    } else if (capturing(s)) { /* stricter than CUDA, which makes an event node */
        err = cudaErrorStreamCaptureUnsupported;
    } else {
        o.seq = ++e->recorded;
        e->refs++;
    }
    pthread_mutex_unlock(&g_lock);
    if (!err && (err = enqueue(s, &o)) != cudaSuccess) {
        pthread_mutex_lock(&g_lock); /* could not queue: complete the record at once */
        e->completed = o.seq > e->completed ? o.seq : e->completed;
        e->when = now();
        event_put_locked(e);
        pthread_mutex_unlock(&g_lock);
    }
    stream_put(s);
    return ret(err);
}

/* The stream's later work waits for the event's latest record at the time of the call (none:
 * no wait). Events of any device are allowed, as in CUDA. Flags must be 0. */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
    init();
    struct CUstream_st *s = stream_get(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find(event);
    struct op o = {.type = OP_WAIT, .ev = e};
    cudaError_t err = !e ? cudaErrorInvalidResourceHandle : flags ? cudaErrorInvalidValue : cudaSuccess;
    if (!err && capturing(s)) err = cudaErrorStreamCaptureUnsupported; /* stricter than CUDA */
    if (!err && (o.seq = e->recorded) > e->completed)
        e->refs++;
    else
        o.seq = 0; /* nothing to wait for */
    pthread_mutex_unlock(&g_lock);
    if (!err && o.seq && (err = enqueue(s, &o)) != cudaSuccess) {
        pthread_mutex_lock(&g_lock);
        event_put_locked(e);
        pthread_mutex_unlock(&g_lock);
    }
    stream_put(s);
    return ret(err);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    init();
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find(event);
    cudaError_t err = !e ? cudaErrorInvalidResourceHandle
                         : e->completed < e->recorded ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&g_lock);
    return ret(err);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    init();
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find(event);
    if (!e) {
        pthread_mutex_unlock(&g_lock);
        return ret(cudaErrorInvalidResourceHandle);
    }
    uint64_t target = e->recorded;
    e->refs++; /* survives a concurrent cudaEventDestroy */
    while (e->completed < target) pthread_cond_wait(&g_cv, &g_lock);
    event_put_locked(e);
    pthread_mutex_unlock(&g_lock);
    return cudaSuccess;
}

/* Checks, in order: both handles live (400); neither has DisableTiming (400); same device (400);
 * both recorded at least once (400, as CUDA documents); both latest records completed (600). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    init();
    if (!ms) return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *a = event_find(start), *b = event_find(end);
    cudaError_t err = cudaSuccess;
    if (!a || !b || ((a->flags | b->flags) & EVENT_DISABLE_TIMING) || a->dev != b->dev ||
        !a->recorded || !b->recorded)
        err = cudaErrorInvalidResourceHandle;
    else if (a->completed < a->recorded || b->completed < b->recorded)
        err = cudaErrorNotReady;
    else
        *ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
                      (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6);
    pthread_mutex_unlock(&g_lock);
    return ret(err);
}

/* ---- Test-double helpers for the stand-in NCCL (nccl_standin.c); not CUDA API --------------- */

/* The device of a live stream, or -1 if `stream` is not one. */
int gpubenchStandinStreamDevice(void *stream) {
    init();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s = stream_find(stream);
    int dev = s ? s->dev : -1;
    pthread_mutex_unlock(&g_lock);
    return dev;
}

/* The device whose cudaMalloc block contains p, or -1 for pinned host, pageable or unknown memory. */
int gpubenchStandinPointerDevice(const void *p) {
    init();
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_find(p);
    int dev = a && a->kind == MEM_DEVICE ? a->dev : -1;
    pthread_mutex_unlock(&g_lock);
    return dev;
}

/* Bytes from p to the end of the block (device or pinned) that contains it; 0 if none does. */
size_t gpubenchStandinPointerRange(const void *p) {
    init();
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_find(p);
    size_t n = a ? a->size - (size_t)((const char *)p - a->base) : 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}
