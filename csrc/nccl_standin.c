/*
 * nccl_standin.c: a TEST DOUBLE of NCCL (libnccl.so.2) for gpubench's tests. It is NOT NCCL.
 *
 * It implements, on host memory and host threads, the subset of NCCL that gpubench's
 * internal/nccl binding calls, on top of the stand-in CUDA runtime (cudart_standin.c), so that
 * the binding can be exercised in CI without a GPU. gpubench never loads it unless a test (or a
 * user) points the binding at it.
 *
 * How it works: communicators of one "clique" live in this process, one rank per stand-in
 * device. Every collective, send and recv is queued on its stream with the stand-in runtime's
 * cudaLaunchHostFunc. When a rank's host function runs, it waits at a rendezvous until every
 * rank of the operation has arrived; the last one to arrive moves the data (on host memory, with
 * GPU-like arithmetic) for everyone, then releases them. So an operation completes only when the
 * streams of all its ranks reach it, as on GPUs. It checks what NCCL checks (or stricter): the
 * stream and every buffer belong to the communicator's device, counts fit the allocations,
 * ranks, types and ops are valid, ranks agree on what they run, group calls are balanced.
 *
 * The stand-in runtime must be the one the process already loaded: the path is taken from
 * GPUBENCH_STANDIN_CUDART and opened with dlopen, which returns the same handle for the same file.
 *
 * Environment:
 *   GPUBENCH_STANDIN_CUDART        path of the stand-in libcudart (required; read at first call)
 *   GPUBENCH_STANDIN_NCCL_VERSION  what ncclGetVersion reports, e.g. 2804, 22703 (default 23007)
 *   GPUBENCH_STANDIN_NCCL_HANG     R@N: rank R's launch number N (from 0, per communicator; a launch
 *                                  is a collective, or a group's sends and recvs) never completes
 *                                  until the clique is aborted (read when a clique is made)
 *   GPUBENCH_STANDIN_NCCL_CORRUPT  R: flip bit 6 of the last byte of the first element of every
 *                                  result rank R receives (read when a clique is made)
 *   GPUBENCH_STANDIN_NCCL_JOIN_WAIT  seconds (0..86400, default 120) that an init of some ranks of a
 *                                  unique id waits for the other ranks, which other threads
 *                                  initialize, before it fails with ncclSystemError (read at each
 *                                  such init)
 *   GPUBENCH_STANDIN_NCCL_TRACE    a file's path: append a line for each ncclGroupStart, ncclGroupEnd,
 *                                  collective, send, recv, ncclMemAlloc and ncclMemFree called (read
 *                                  at the first call)
 *   NCCL_DEBUG                     WARN, INFO or TRACE: print each failure on stderr
 *
 * Plain C11 + POSIX threads + dlopen; no CUDA or NCCL header is used: every type is declared below.
 * csrc/README.md documents the behaviour and where it differs from NCCL.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ---- Types and constants (values of NCCL's src/nccl.h.in) ----------------------------------- */

typedef int ncclResult_t;
enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
};

enum { T_INT8, T_UINT8, T_INT32, T_UINT32, T_INT64, T_UINT64, T_HALF, T_FLOAT, T_DOUBLE, T_BF16, NTYPES };
static const size_t type_size[NTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, NOPS };

typedef struct { char internal[128]; } ncclUniqueId; /* NCCL_UNIQUE_ID_BYTES */
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
/* ncclConfig_t, as read here: size_t size @0, unsigned magic @8, unsigned version @12, int blocking @16 */
#define CONFIG_MAGIC 0xcafebeefu
#define ID_MAGIC "gbNCCLsi"       /* bytes 8..15 of a unique id made here; bytes 0..7 are the clique id */

/* Operation kinds; K_INIT marks a recorded ncclCommInitRank in a group. */
enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCESCATTER, K_ALLTOALL, K_SEND, K_RECV,
       K_INIT };
static const char *const kind_name[] = {"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
                                        "ncclReduceScatter", "ncclAlltoAll", "ncclSend", "ncclRecv",
                                        "init"};
#define IS_P2P(k) ((k) == K_SEND || (k) == K_RECV)
#define REDUCES(k) ((k) == K_ALLREDUCE || (k) == K_REDUCE || (k) == K_REDUCESCATTER)
#define ROOTED(k) ((k) == K_BROADCAST || (k) == K_REDUCE)

/* ---- State --------------------------------------------------------------------------------- */

struct rdv;
struct part { /* one rank's share of one operation */
    int kind, rank, peer, root, type, op; /* peer: send/recv; root: broadcast/reduce */
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    uint64_t seq;  /* collectives: the communicator's sequence; p2p: per (sender, receiver) pair */
    int corrupt;   /* GPUBENCH_STANDIN_NCCL_CORRUPT names this rank */
    struct rdv *rdv;
};

struct rdv { /* where the ranks of one operation meet; under its clique's mu */
    int p2p, from, to; /* key: (seq) for collectives, (from, to, seq) for send/recv */
    uint64_t seq;
    int need, have, users, done;
    struct rdv *next;
    struct part *parts[]; /* collectives: by rank; p2p: [0] send, [1] recv */
};

struct clique { /* the ranks made by one ncclGetUniqueId */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, refs, aborted; /* refs: live comms + queued host functions */
    ncclResult_t *async;  /* per rank: ncclCommGetAsyncError */
    int *pending;         /* per rank: host functions queued or running */
    int hang_rank, corrupt_rank;
    long long hang_at;
    struct rdv *rdvs;
};

struct ncclComm {
    struct clique *cl;     /* NULL until the init group ends well; stays NULL if init failed */
    ncclResult_t init_err; /* why init failed */
    uint64_t id;           /* clique id, from the unique id */
    int rank, n, dev, blocking, finalized;
    uint64_t seq, launches;       /* collectives issued; host functions queued (for the hang fault) */
    uint64_t *sendseq, *recvseq;  /* per peer */
    /* Launches captured into CUDA graphs (freed with the communicator), and the sequences their
     * runs take, under the clique's mu: GRAPH_SEQ | count, apart from calls made outside graphs. */
    struct launch *graphs;
    uint64_t gseq, *gsendseq, *grecvseq;
    struct ncclComm *next;        /* registry */
};

struct launch { /* the payload of one host function: one collective, or a group's send/recv batch */
    struct clique *cl;
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, hang, p2p, nparts, cap;
    int graph;           /* captured: run anew, with fresh sequences, at each launch of the graph */
    struct launch *next; /* the communicator's graphs list */
    struct part *parts;
};

#define GRAPH_SEQ ((uint64_t)1 << 63)

struct rec { /* a call recorded inside a group */
    ncclComm_t comm;
    cudaStream_t stream;
    struct part p;
};

/* The stand-in CUDA runtime's entry points. */
static int (*rt_launch)(cudaStream_t, void (*)(void *), void *);
static int (*rt_get_device)(int *);
static int (*rt_set_device)(int);
static int (*rt_malloc)(void **, size_t);
static int (*rt_free)(void *);
static int (*rt_device_count)(int *);
static int (*rt_stream_device)(void *);
static int (*rt_pointer_device)(const void *);
static int (*rt_is_capturing)(cudaStream_t, int *);
static size_t (*rt_pointer_range)(const void *);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_loaded, g_debug;
static FILE *g_trace; /* GPUBENCH_STANDIN_NCCL_TRACE, line-buffered */
static char g_load_err[512], g_cudart[256];
static int g_version = 23007, g_vnorm = 23007; /* as reported; as major*10000 + minor*100 + patch */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* registry, unique id counter */
static struct ncclComm *g_comms;
static uint64_t g_idcount;
static pthread_mutex_t g_err_mu = PTHREAD_MUTEX_INITIALIZER; /* a leaf lock */
static char g_last[1024];

static _Thread_local char t_last[1024];     /* what ncclGetLastError hands this thread */
static _Thread_local int t_depth;           /* group nesting */
static _Thread_local ncclResult_t t_group_err;
static _Thread_local struct rec *t_recs;
static _Thread_local size_t t_nrecs, t_caprecs;

/* ---- Errors, environment, loading the runtime ---------------------------------------------- */

/* Records a failure as the process-wide last error (NCCL does so for every WARN) and returns it. */
static ncclResult_t fail(ncclResult_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_err_mu);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    if (g_debug) fprintf(stderr, "nccl_standin WARN %s\n", g_last);
    pthread_mutex_unlock(&g_err_mu);
    va_end(ap);
    return code;
}

static int env_int(const char *name, long long *v, long long min, long long max) {
    const char *s = getenv(name);
    char *end;
    if (!s || !*s) return 0;
    *v = strtoll(s, &end, 10);
    if (*end || *v < min || *v > max) {
        fprintf(stderr, "nccl_standin: ignoring %s=%s (want an integer in %lld..%lld)\n", name, s, min,
                max);
        return 0;
    }
    return 1;
}

static int norm_version(int v) { /* 2804 -> 20804 (old encoding, up to 2.8); 22703 stays */
    return v < 10000 ? v / 1000 * 10000 + v % 1000 / 100 * 100 + v % 100 : v;
}

static pthread_cond_t g_join_cv; /* ranks that other threads initialize arrive (with g_mu) */

static void load(void) {
    pthread_condattr_t ca; /* the join wait is a duration: measure it on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_join_cv, &ca);
    pthread_condattr_destroy(&ca);
    long long v;
    const char *dbg = getenv("NCCL_DEBUG");
    g_debug = dbg && (!strcasecmp(dbg, "WARN") || !strcasecmp(dbg, "INFO") || !strcasecmp(dbg, "TRACE"));
    const char *tr = getenv("GPUBENCH_STANDIN_NCCL_TRACE");
    if (tr && *tr) {
        if ((g_trace = fopen(tr, "a")) != NULL) setvbuf(g_trace, NULL, _IOLBF, 0);
        else fprintf(stderr, "nccl_standin: ignoring GPUBENCH_STANDIN_NCCL_TRACE=%s: cannot open it\n", tr);
    }
    if (env_int("GPUBENCH_STANDIN_NCCL_VERSION", &v, 1, 999999)) g_version = (int)v;
    g_vnorm = norm_version(g_version);
    const char *path = getenv("GPUBENCH_STANDIN_CUDART");
    if (!path || !*path) {
        snprintf(g_load_err, sizeof g_load_err, "GPUBENCH_STANDIN_CUDART is not set: the stand-in NCCL "
                 "needs the path of the stand-in libcudart that the process loaded");
        return;
    }
    snprintf(g_cudart, sizeof g_cudart, "%s", path);
    /* The instance the binding loaded, if it did; else load it here, and a later dlopen of the
     * same file by the binding gets this instance. Another copy of the file would not. */
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h && (h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) != NULL)
        fprintf(stderr, "nccl_standin: loaded GPUBENCH_STANDIN_CUDART=%s itself: the CUDA binding must "
                "load this very file, or its streams and buffers are unknown here\n", path);
    if (!h) {
        snprintf(g_load_err, sizeof g_load_err, "GPUBENCH_STANDIN_CUDART=%s: %s", path, dlerror());
        return;
    }
    /* POSIX lets dlsym's result be copied into a function pointer. */
    const struct { const char *name; void *slot; } syms[] = {
        {"cudaLaunchHostFunc", &rt_launch}, {"cudaGetDevice", &rt_get_device},
        {"cudaSetDevice", &rt_set_device}, {"cudaGetDeviceCount", &rt_device_count},
        {"cudaMalloc", &rt_malloc}, {"cudaFree", &rt_free},
        {"gpubenchStandinStreamDevice", &rt_stream_device},
        {"gpubenchStandinPointerDevice", &rt_pointer_device},
        {"gpubenchStandinPointerRange", &rt_pointer_range},
        {"cudaStreamIsCapturing", &rt_is_capturing},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *fn = dlsym(h, syms[i].name);
        if (!fn) {
            snprintf(g_load_err, sizeof g_load_err, "GPUBENCH_STANDIN_CUDART=%s has no %s: not the "
                     "stand-in CUDA runtime (csrc/cudart_standin.c)", path, syms[i].name);
            return;
        }
        memcpy(syms[i].slot, &fn, sizeof fn);
    }
    g_loaded = 1;
}

/* Every entry point starts here: ncclSystemError (with the reason as last error) if the stand-in
 * runtime could not be loaded. */
static ncclResult_t ready(void) {
    pthread_once(&g_once, load);
    return g_loaded ? ncclSuccess : fail(ncclSystemError, "%s", g_load_err);
}

/* Calls that the reported version does not have fail, so that the binding's version gates are
 * tested: NCCL before `since` had no such function. */
static ncclResult_t need_version(const char *fn, int since) {
    if (g_vnorm >= since) return ncclSuccess;
    return fail(ncclInvalidUsage, "%s is not in NCCL %d.%d.%d (GPUBENCH_STANDIN_NCCL_VERSION=%d); "
                "it needs %d.%d.%d", fn, g_vnorm / 10000, g_vnorm / 100 % 100, g_vnorm % 100, g_version,
                since / 10000, since / 100 % 100, since % 100);
}

/* What a rank sees when another rank aborted: ncclRemoteError, which NCCL added in 2.13. */
static ncclResult_t remote_error(void) { return g_vnorm >= 21300 ? ncclRemoteError : ncclSystemError; }

/* ---- Arithmetic as the GPU does it --------------------------------------------------------- */

static float h2f(uint16_t h) { /* IEEE binary16 -> float, exact */
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1f, man = h & 0x3ff, x;
    if (exp == 0x1f)
        x = sign | 0x7f800000 | man << 13;
    else if (exp)
        x = sign | (exp + 112) << 23 | man << 13;
    else if (!man)
        x = sign;
    else { /* subnormal: normalize */
        uint32_t e = 113;
        while (!(man & 0x400)) man <<= 1, e--;
        x = sign | e << 23 | (man & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f2h(float f) { /* float -> binary16, round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = x >> 16 & 0x8000, exp = x >> 23 & 0xff, man = x & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | man >> 13 : 0));
    int e = (int)exp - 112; /* the binary16 exponent field */
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    uint32_t h, rem, half;
    if (e <= 0) { /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        int shift = 14 - e;
        man |= 0x800000;
        h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    } else {
        h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff, half = 0x1000;
    }
    if (rem > half || (rem == half && (h & 1))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

static float b2f(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f2b(float f) { /* float -> bfloat16, round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)(x >> 16 | 0x40); /* NaN stays quiet NaN */
    return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

static float fop(float x, float y, int op) {
    switch (op) {
    case OP_PROD: return x * y;
    case OP_MAX: return x > y ? x : y;
    case OP_MIN: return x < y ? x : y;
    default: return x + y; /* sum, and avg before its division */
    }
}

static double dop(double x, double y, int op) {
    switch (op) {
    case OP_PROD: return x * y;
    case OP_MAX: return x > y ? x : y;
    case OP_MIN: return x < y ? x : y;
    default: return x + y;
    }
}

#define LOOP(T, EXPR)                                                                          \
    do {                                                                                       \
        T *a_ = acc;                                                                           \
        const T *b_ = in;                                                                      \
        for (size_t i = 0; i < n; i++) {                                                       \
            T x = a_[i], y = b_[i];                                                            \
            a_[i] = (EXPR);                                                                    \
        }                                                                                      \
    } while (0)
/* Integers wrap: the arithmetic is done in the unsigned type U. */
#define INT_REDUCE(T, U)                                                                       \
    do {                                                                                       \
        if (op == OP_SUM || op == OP_AVG) LOOP(T, (T)(U)((U)x + (U)y));                        \
        else if (op == OP_PROD) LOOP(T, (T)(U)((U)x * (U)y));                                  \
        else if (op == OP_MAX) LOOP(T, x > y ? x : y);                                         \
        else LOOP(T, x < y ? x : y);                                                           \
    } while (0)

/* acc[i] = acc[i] op in[i] for n elements; 16-bit floats are rounded back at every step. */
static void reduce_into(void *acc, const void *in, size_t n, int type, int op) {
    switch (type) {
    case T_INT8: INT_REDUCE(int8_t, uint8_t); break;
    case T_UINT8: INT_REDUCE(uint8_t, uint8_t); break;
    case T_INT32: INT_REDUCE(int32_t, uint32_t); break;
    case T_UINT32: INT_REDUCE(uint32_t, uint32_t); break;
    case T_INT64: INT_REDUCE(int64_t, uint64_t); break;
    case T_UINT64: INT_REDUCE(uint64_t, uint64_t); break;
    case T_HALF: LOOP(uint16_t, f2h(fop(h2f(x), h2f(y), op))); break;
    case T_BF16: LOOP(uint16_t, f2b(fop(b2f(x), b2f(y), op))); break;
    case T_FLOAT: LOOP(float, fop(x, y, op)); break;
    case T_DOUBLE: LOOP(double, dop(x, y, op)); break;
    }
}

/* The second half of avg: acc[i] /= nranks (integers: truncating division of the wrapped sum). */
#define DIV_LOOP(T, EXPR)                                                                      \
    do {                                                                                       \
        T *a_ = acc;                                                                           \
        for (size_t i = 0; i < n; i++) {                                                       \
            T x = a_[i];                                                                       \
            a_[i] = (T)(EXPR);                                                                 \
        }                                                                                      \
    } while (0)
static void divide(void *acc, size_t n, int type, int nranks) {
    switch (type) {
    case T_INT8: DIV_LOOP(int8_t, x / nranks); break;
    case T_UINT8: DIV_LOOP(uint8_t, x / nranks); break;
    case T_INT32: DIV_LOOP(int32_t, x / nranks); break;
    case T_UINT32: DIV_LOOP(uint32_t, x / (uint32_t)nranks); break;
    case T_INT64: DIV_LOOP(int64_t, x / nranks); break;
    case T_UINT64: DIV_LOOP(uint64_t, x / (uint64_t)nranks); break;
    case T_HALF: DIV_LOOP(uint16_t, f2h(h2f(x) / (float)nranks)); break;
    case T_BF16: DIV_LOOP(uint16_t, f2b(b2f(x) / (float)nranks)); break;
    case T_FLOAT: DIV_LOOP(float, x / (float)nranks); break;
    case T_DOUBLE: DIV_LOOP(double, x / nranks); break;
    }
}

/* ---- Cliques, rendezvous, host functions ---------------------------------------------------- */

static void clique_free(struct clique *cl) {
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl->async);
    free(cl->pending);
    free(cl);
}

/* Drops one reference (cl->mu held); the caller frees the clique after unlocking if this returns 1. */
static int clique_put_locked(struct clique *cl) { return --cl->refs == 0; }

/* An async error for rank r (cl->mu held); the first one sticks. */
static void set_async(struct clique *cl, int r, ncclResult_t e) {
    if (cl->async[r] == ncclSuccess) cl->async[r] = e;
}

/* Marks the clique aborted and wakes every waiting host function (cl->mu held). */
static void abort_locked(struct clique *cl, int except_rank, ncclResult_t why) {
    cl->aborted = 1;
    for (int r = 0; r < cl->n; r++)
        if (r != except_rank) set_async(cl, r, why);
    pthread_cond_broadcast(&cl->cv);
}

static void deliver(const struct part *p, size_t esz) { /* the corrupt fault, on one received result */
    if (p->corrupt && p->count > 0) ((unsigned char *)p->recvbuf)[esz - 1] ^= 0x40;
}

/* The last rank to arrive moves the data for every rank of r (cl->mu held; the others wait). */
static void complete(struct clique *cl, struct rdv *r) {
    struct part *p0 = r->parts[0];
    for (int i = 1; i < r->need; i++) {
        struct part *q = r->parts[i];
        if (q->count != p0->count || q->type != p0->type ||
            (!r->p2p && (q->kind != p0->kind || (REDUCES(q->kind) && q->op != p0->op) ||
                         (ROOTED(q->kind) && q->root != p0->root)))) {
            fail(ncclInvalidUsage, "ranks disagree on %s %llu: rank %d issued %s(count %zu, type %d, "
                 "op %d, root %d), rank %d issued %s(count %zu, type %d, op %d, root %d)",
                 r->p2p ? "send/recv" : "collective", (unsigned long long)r->seq, p0->rank,
                 kind_name[p0->kind], p0->count, p0->type, p0->op, p0->root, q->rank, kind_name[q->kind],
                 q->count, q->type, q->op, q->root);
            for (int k = 0; k < r->need; k++) set_async(cl, r->parts[k]->rank, ncclInvalidUsage);
            return;
        }
    }
    int n = cl->n, kind = p0->kind;
    size_t esz = type_size[p0->type], c = p0->count, chunk = c * esz;
    if (chunk == 0) return; /* nothing to move; the buffers may be NULL */
    if (r->p2p) {
        memmove(r->parts[1]->recvbuf, p0->sendbuf, chunk);
        deliver(r->parts[1], esz);
        return;
    }
    /* Results are built in a temporary first, so in-place operations read unchanged inputs. */
    size_t tmpsize = kind == K_ALLGATHER || kind == K_REDUCESCATTER ? n * chunk
                   : kind == K_ALLTOALL ? (size_t)n * n * chunk : chunk;
    char *tmp = malloc(tmpsize ? tmpsize : 1);
    if (!tmp) {
        fail(ncclSystemError, "out of host memory for a %zu-byte %s", tmpsize, kind_name[kind]);
        abort_locked(cl, -1, ncclSystemError);
        return;
    }
    switch (kind) {
    case K_ALLREDUCE: case K_REDUCE: case K_REDUCESCATTER: {
        size_t elems = kind == K_REDUCESCATTER ? (size_t)n * c : c;
        memcpy(tmp, p0->sendbuf, elems * esz);
        for (int i = 1; i < n; i++) reduce_into(tmp, r->parts[i]->sendbuf, elems, p0->type, p0->op);
        if (p0->op == OP_AVG) divide(tmp, elems, p0->type, n);
        for (int i = 0; i < n; i++) {
            if (kind == K_REDUCE && i != p0->root) continue;
            memcpy(r->parts[i]->recvbuf, tmp + (kind == K_REDUCESCATTER ? i * chunk : 0), chunk);
            deliver(r->parts[i], esz);
        }
        break;
    }
    case K_BROADCAST:
        memcpy(tmp, r->parts[p0->root]->sendbuf, chunk);
        for (int i = 0; i < n; i++) {
            memcpy(r->parts[i]->recvbuf, tmp, chunk);
            deliver(r->parts[i], esz);
        }
        break;
    case K_ALLGATHER:
        for (int i = 0; i < n; i++) memcpy(tmp + i * chunk, r->parts[i]->sendbuf, chunk);
        for (int i = 0; i < n; i++) {
            memcpy(r->parts[i]->recvbuf, tmp, n * chunk);
            deliver(r->parts[i], esz);
        }
        break;
    case K_ALLTOALL: /* tmp[i][j]: what rank i sends to rank j */
        for (int i = 0; i < n; i++) memcpy(tmp + (size_t)i * n * chunk, r->parts[i]->sendbuf, n * chunk);
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < n; i++)
                memcpy((char *)r->parts[j]->recvbuf + i * chunk, tmp + ((size_t)i * n + j) * chunk, chunk);
            deliver(r->parts[j], esz);
        }
        break;
    }
    free(tmp);
}

/* Puts p into its rendezvous (cl->mu held), creating it if p is the first; completes it if p is
 * the last. Returns 0 if out of memory. */
static int join(struct clique *cl, struct part *p) {
    int p2p = IS_P2P(p->kind);
    int from = p->kind == K_SEND ? p->rank : p->peer, to = p->kind == K_SEND ? p->peer : p->rank;
    struct rdv *r = cl->rdvs;
    while (r && !(r->p2p == p2p && r->seq == p->seq && (!p2p || (r->from == from && r->to == to))))
        r = r->next;
    if (!r) {
        int need = p2p ? 2 : cl->n;
        if (!(r = calloc(1, sizeof *r + (size_t)need * sizeof r->parts[0]))) return 0;
        *r = (struct rdv){.p2p = p2p, .from = from, .to = to, .seq = p->seq, .need = need,
                          .next = cl->rdvs};
        cl->rdvs = r;
    }
    r->parts[p2p ? p->kind == K_RECV : p->rank] = p;
    p->rdv = r;
    r->users++;
    if (++r->have == r->need) {
        complete(cl, r);
        r->done = 1;
        pthread_cond_broadcast(&cl->cv);
    }
    return 1;
}

static void leave(struct clique *cl, struct rdv *r) { /* cl->mu held */
    if (--r->users > 0) return;
    struct rdv **pp = &cl->rdvs;
    while (*pp != r) pp = &(*pp)->next;
    *pp = r->next;
    free(r);
}

/* Runs on a stream's worker thread (cudaLaunchHostFunc): joins every part, waits until they are
 * all done or the clique is aborted, then lets the stream go on. */
static void host_fn(void *arg) {
    struct launch *L = arg;
    struct clique *cl = L->cl;
    int joined = 0;
    pthread_mutex_lock(&cl->mu);
    while (L->hang && !cl->aborted) pthread_cond_wait(&cl->cv, &cl->mu); /* the hang fault */
    while (joined < L->nparts && !cl->aborted) {
        if (!join(cl, &L->parts[joined])) {
            fail(ncclSystemError, "out of host memory in a rendezvous");
            abort_locked(cl, -1, ncclSystemError);
            break;
        }
        joined++;
    }
    for (int i = 0; i < joined; i++)
        while (!L->parts[i].rdv->done && !cl->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
    for (int i = 0; i < joined; i++) leave(cl, L->parts[i].rdv);
    cl->pending[L->rank]--;
    pthread_cond_broadcast(&cl->cv); /* ncclCommFinalize may wait for pending == 0 */
    int last = clique_put_locked(cl);
    pthread_mutex_unlock(&cl->mu);
    if (last) clique_free(cl);
    free(L->parts);
    free(L);
}

/* Runs at each launch of a CUDA graph that captured launch T: a fresh launch of T's parts, whose
 * sequences come from the communicator's count of graph runs. Every rank launches its graphs in
 * the same order, as NCCL asks of them, so the sequences meet at their rendezvous. */
static void graph_host_fn(void *arg) {
    struct launch *T = arg, *L = malloc(sizeof *L);
    struct part *parts = malloc((size_t)T->nparts * sizeof *parts);
    struct clique *cl = T->cl;
    ncclComm_t c = T->comm;
    pthread_mutex_lock(&cl->mu);
    if (!L || !parts) {
        fail(ncclSystemError, "out of host memory running a captured launch");
        abort_locked(cl, -1, ncclSystemError);
        pthread_mutex_unlock(&cl->mu);
        free(L);
        free(parts);
        return;
    }
    *L = *T;
    L->graph = 0, L->hang = 0, L->next = NULL, L->parts = parts, L->cap = T->nparts;
    for (int j = 0; j < T->nparts; j++) {
        struct part *p = &parts[j];
        *p = T->parts[j];
        p->rdv = NULL;
        if (p->kind == K_SEND)
            p->seq = GRAPH_SEQ | c->gsendseq[p->peer]++;
        else if (p->kind == K_RECV)
            p->seq = GRAPH_SEQ | c->grecvseq[p->peer]++;
        else
            p->seq = GRAPH_SEQ | c->gseq++;
    }
    cl->refs++;
    cl->pending[L->rank]++;
    pthread_mutex_unlock(&cl->mu);
    host_fn(L);
}

/* ---- Communicators ------------------------------------------------------------------------- */

static int comm_live(ncclComm_t c) {
    pthread_mutex_lock(&g_mu);
    struct ncclComm *x = g_comms;
    while (x && x != c) x = x->next;
    pthread_mutex_unlock(&g_mu);
    return c && x == c;
}

static ncclResult_t check_comm(ncclComm_t c) {
    return comm_live(c) ? ncclSuccess : fail(ncclInvalidArgument, "invalid communicator %p", (void *)c);
}

/* Whether c can take operations now. */
static ncclResult_t check_usable(ncclComm_t c) {
    ncclResult_t e = check_comm(c);
    if (e) return e;
    if (!c->cl)
        return fail(ncclInvalidUsage, "communicator %p: its initialization failed (error %d)", (void *)c,
                    c->init_err);
    if (c->finalized) return fail(ncclInvalidUsage, "communicator %p was finalized", (void *)c);
    pthread_mutex_lock(&c->cl->mu);
    int aborted = c->cl->aborted;
    pthread_mutex_unlock(&c->cl->mu);
    if (aborted) return fail(remote_error(), "communicator %p: its clique was aborted", (void *)c);
    return ncclSuccess;
}

/* Unregisters c and frees it; with `abort`, first marks its clique aborted, which wakes every
 * waiting host function and gives the other ranks an async error. */
static ncclResult_t comm_release(ncclComm_t c, int abort) {
    pthread_mutex_lock(&g_mu);
    struct ncclComm **pp = &g_comms;
    while (*pp && *pp != c) pp = &(*pp)->next;
    int found = *pp != NULL;
    if (found) *pp = c->next;
    pthread_mutex_unlock(&g_mu);
    if (!found) return fail(ncclInvalidArgument, "invalid communicator %p", (void *)c);
    struct clique *cl = c->cl;
    if (cl) {
        pthread_mutex_lock(&cl->mu);
        if (abort) abort_locked(cl, c->rank, remote_error());
        int last = clique_put_locked(cl);
        for (struct launch *T = c->graphs; T; T = T->next) /* each captured launch held one */
            last = clique_put_locked(cl);
        pthread_mutex_unlock(&cl->mu);
        if (last) clique_free(cl);
    }
    while (c->graphs) {
        struct launch *T = c->graphs;
        c->graphs = T->next;
        free(T->parts);
        free(T);
    }
    free(c->sendseq);
    free(c->recvseq);
    free(c->gsendseq);
    free(c->grecvseq);
    free(c);
    return ncclSuccess;
}

/* Parses GPUBENCH_STANDIN_NCCL_HANG and _CORRUPT (at each clique's creation, so tests can change them). */
static void read_faults(struct clique *cl) {
    cl->hang_rank = cl->corrupt_rank = -1;
    cl->hang_at = -1;
    const char *s = getenv("GPUBENCH_STANDIN_NCCL_HANG");
    if (s && *s) {
        int r, used = 0;
        long long at;
        if (sscanf(s, "%d@%lld%n", &r, &at, &used) == 2 && !s[used] && r >= 0 && at >= 0)
            cl->hang_rank = r, cl->hang_at = at;
        else
            fprintf(stderr, "nccl_standin: ignoring GPUBENCH_STANDIN_NCCL_HANG=%s (want R@N)\n", s);
    }
    long long v;
    if (env_int("GPUBENCH_STANDIN_NCCL_CORRUPT", &v, 0, INT_MAX)) cl->corrupt_rank = (int)v;
}

/* ---- Groups -------------------------------------------------------------------------------- */

/* Inside a group, the first failure also fails the group: ncclGroupEnd returns it and launches nothing. */
static ncclResult_t in_group(ncclResult_t e) {
    if (e && t_depth > 0 && !t_group_err) t_group_err = e;
    return e;
}

static ncclResult_t record(ncclComm_t comm, cudaStream_t stream, const struct part *p) {
    if (t_nrecs == t_caprecs) {
        size_t cap = t_caprecs ? 2 * t_caprecs : 16;
        struct rec *x = realloc(t_recs, cap * sizeof *x);
        if (!x) return fail(ncclSystemError, "out of host memory recording a group");
        t_recs = x, t_caprecs = cap;
    }
    t_recs[t_nrecs++] = (struct rec){comm, stream, *p};
    return ncclSuccess;
}

static int first_of_id(size_t i) { /* whether record i is the first init of its unique id */
    for (size_t j = 0; j < i; j++)
        if (t_recs[j].comm->id == t_recs[i].comm->id) return 0;
    return 1;
}

static struct clique *new_clique(int n) {
    struct clique *cl = calloc(1, sizeof *cl);
    if (cl && (!(cl->async = calloc((size_t)n, sizeof *cl->async)) ||
               !(cl->pending = calloc((size_t)n, sizeof *cl->pending)))) {
        free(cl->async);
        free(cl);
        cl = NULL;
    }
    if (!cl) return NULL;
    pthread_mutex_init(&cl->mu, NULL);
    pthread_cond_init(&cl->cv, NULL);
    cl->n = cl->refs = n; /* one reference per communicator */
    read_faults(cl);
    return cl;
}

/* Ranks of one unique id initialized from several threads (one rank per thread, as one rank per
 * process initializes with NCCL). Each thread's group registers its ranks in the id's join, then
 * waits, as a blocking ncclCommInitRank does, until every rank has arrived; the group that brings
 * the last rank makes the clique. A group that waits longer than GPUBENCH_STANDIN_NCCL_JOIN_WAIT
 * seconds takes its ranks back and fails; the join is freed when every rank has taken the clique,
 * or when no rank is left in it. */
struct join {
    uint64_t id;
    int n, arrived, taken; /* ranks registered; ranks that have taken the outcome */
    int *dev;              /* per rank: its device, or -1 until it arrives */
    int done;              /* every rank arrived: the outcome is cl, or err */
    ncclResult_t err;
    struct clique *cl;
    struct join *next;
};
static struct join *g_joins; /* under g_mu */
enum { JOIN_WAIT_DEFAULT_S = 120, JOIN_WAIT_MAX_S = 86400 };

struct want { /* one unique id of which this thread's group initializes some ranks, not all */
    size_t first; /* its first init record */
    int count;
    struct join *j;
    struct clique *cl;
};

static void join_unlink_free(struct join *j) { /* g_mu held */
    struct join **pp = &g_joins;
    while (*pp && *pp != j) pp = &(*pp)->next;
    if (*pp) *pp = j->next;
    free(j->dev);
    free(j);
}

/* Whether the ranks of w fit into its join (g_mu held): same nranks, each rank and device once. */
static ncclResult_t join_check(const struct want *w) {
    const struct join *j = w->j;
    ncclComm_t a = t_recs[w->first].comm;
    if (j->n != a->n)
        return fail(ncclInvalidUsage, "ranks of one unique id disagree on nranks (%d and %d)", j->n, a->n);
    for (size_t i = w->first; i < t_nrecs; i++) {
        ncclComm_t b = t_recs[i].comm;
        if (b->id != a->id) continue;
        if (j->dev[b->rank] >= 0)
            return fail(ncclInvalidUsage, "rank %d initialized twice with one unique id", b->rank);
        for (int r = 0; r < j->n; r++)
            if (j->dev[r] == b->dev)
                return fail(ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d both on CUDA "
                            "device %d", r, b->rank, b->dev);
    }
    return ncclSuccess;
}

/* Registers every id of ws in its join, waits until all are complete (or the wait runs out), then
 * takes each id's clique into ws[i].cl. Any failure fails the whole group: its ranks are taken
 * back from the joins that are not complete. */
static ncclResult_t join_threads(struct want *ws, size_t nw) {
    long long wait_s = JOIN_WAIT_DEFAULT_S;
    env_int("GPUBENCH_STANDIN_NCCL_JOIN_WAIT", &wait_s, 0, JOIN_WAIT_MAX_S);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)wait_s;
    ncclResult_t e = ncclSuccess;
    pthread_mutex_lock(&g_mu);
    /* Check everything first, so that a refused group leaves the joins as they were. */
    for (size_t k = 0; k < nw && !e; k++) {
        ncclComm_t a = t_recs[ws[k].first].comm;
        struct join *j = g_joins;
        while (j && j->id != a->id) j = j->next;
        if (!j) {
            if ((j = calloc(1, sizeof *j)) != NULL && !(j->dev = malloc((size_t)a->n * sizeof *j->dev))) {
                free(j);
                j = NULL;
            }
            if (!j) {
                e = fail(ncclSystemError, "out of host memory joining a communicator");
                break;
            }
            j->id = a->id, j->n = a->n;
            for (int r = 0; r < a->n; r++) j->dev[r] = -1;
            j->next = g_joins; /* linked now; an empty join is freed below if the group fails */
            g_joins = j;
        }
        ws[k].j = j;
        e = join_check(&ws[k]);
    }
    if (e) {
        for (size_t k = 0; k < nw; k++)
            if (ws[k].j && ws[k].j->arrived == 0) join_unlink_free(ws[k].j);
        pthread_mutex_unlock(&g_mu);
        return e;
    }
    for (size_t k = 0; k < nw; k++) {
        struct join *j = ws[k].j;
        for (size_t i = ws[k].first; i < t_nrecs; i++)
            if (t_recs[i].comm->id == j->id) j->dev[t_recs[i].comm->rank] = t_recs[i].comm->dev;
        if ((j->arrived += ws[k].count) == j->n) {
            if (!(j->cl = new_clique(j->n)))
                j->err = fail(ncclSystemError, "out of host memory creating a communicator");
            j->done = 1;
            pthread_cond_broadcast(&g_join_cv);
        }
    }
    for (;;) {
        size_t k = 0;
        while (k < nw && ws[k].j->done) k++;
        if (k == nw || pthread_cond_timedwait(&g_join_cv, &g_mu, &until)) break;
    }
    for (size_t k = 0; k < nw; k++) {
        struct join *j = ws[k].j;
        if (j->done) {
            if (j->err) e = e ? e : j->err;
            ws[k].cl = j->cl;
            if ((j->taken += ws[k].count) == j->n) join_unlink_free(j);
            continue;
        }
        ncclResult_t te = fail(ncclSystemError, "a unique id had %d of its %d ranks after waiting %lld s "
                               "(GPUBENCH_STANDIN_NCCL_JOIN_WAIT): the others never called "
                               "ncclCommInitRank", j->arrived, j->n, wait_s);
        e = e ? e : te;
        for (size_t i = ws[k].first; i < t_nrecs; i++)
            if (t_recs[i].comm->id == j->id) j->dev[t_recs[i].comm->rank] = -1;
        if ((j->arrived -= ws[k].count) == 0) join_unlink_free(j);
    }
    pthread_mutex_unlock(&g_mu);
    return e;
}

/* The init calls of a group: every rank of each unique id here at most once, on distinct
 * devices. Then each unique id becomes a clique: at once when all its ranks are in this group,
 * else once other threads have initialized the rest (join_threads). */
static ncclResult_t finish_inits(void) {
    size_t nw = 0;
    for (size_t i = 0; i < t_nrecs; i++) {
        if (!first_of_id(i)) continue;
        ncclComm_t a = t_recs[i].comm;
        int count = 0;
        for (size_t j = i; j < t_nrecs; j++) {
            ncclComm_t b = t_recs[j].comm;
            if (b->id != a->id) continue;
            count++;
            if (b->n != a->n)
                return fail(ncclInvalidUsage, "ranks of one unique id disagree on nranks (%d and %d)", a->n,
                            b->n);
            for (size_t k = i; k < j; k++) {
                ncclComm_t c = t_recs[k].comm;
                if (c->id != a->id) continue;
                if (c->rank == b->rank)
                    return fail(ncclInvalidUsage, "rank %d initialized twice with one unique id", b->rank);
                if (c->dev == b->dev)
                    return fail(ncclInvalidUsage,
                                "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", c->rank,
                                b->rank, b->dev);
            }
        }
        nw += count < a->n;
    }
    struct want *ws = nw ? calloc(nw, sizeof *ws) : NULL;
    if (nw && !ws) return fail(ncclSystemError, "out of host memory joining a communicator");
    ncclResult_t err = ncclSuccess;
    size_t k = 0;
    for (size_t i = 0; i < t_nrecs; i++) {
        if (!first_of_id(i)) continue;
        ncclComm_t a = t_recs[i].comm;
        int count = 0;
        for (size_t j = i; j < t_nrecs; j++) count += t_recs[j].comm->id == a->id;
        if (count < a->n) {
            ws[k++] = (struct want){.first = i, .count = count};
            continue;
        }
        struct clique *cl = new_clique(a->n);
        if (!cl) err = fail(ncclSystemError, "out of host memory creating a communicator");
        for (size_t j = i; cl && j < t_nrecs; j++)
            if (t_recs[j].comm->id == a->id) t_recs[j].comm->cl = cl;
    }
    if (nw && !err) {
        err = join_threads(ws, nw);
        for (k = 0; k < nw; k++) /* ws[k].j may be freed by now */
            for (size_t j = ws[k].first; ws[k].cl && j < t_nrecs; j++)
                if (t_recs[j].comm->id == t_recs[ws[k].first].comm->id) t_recs[j].comm->cl = ws[k].cl;
    }
    free(ws);
    return err;
}

/* Queues the group's operations: one host function per collective, and one per (communicator,
 * stream) for all the group's sends and recvs, which NCCL runs concurrently (a ring of grouped
 * sends and recvs would deadlock if they ran one by one). */
static ncclResult_t launch_all(void) {
    struct launch **Ls = calloc(t_nrecs ? t_nrecs : 1, sizeof *Ls);
    size_t nL = 0;
    ncclResult_t err = Ls ? ncclSuccess : fail(ncclSystemError, "out of host memory launching a group");
    for (size_t i = 0; i < t_nrecs && !err; i++) {
        struct rec *rc = &t_recs[i];
        ncclComm_t c = rc->comm;
        if ((err = check_usable(c)) != ncclSuccess) break; /* destroyed or aborted since the call */
        int p2p = IS_P2P(rc->p.kind);
        struct launch *L = NULL;
        for (size_t k = 0; p2p && k < nL && !L; k++)
            if (Ls[k]->p2p && Ls[k]->comm == c && Ls[k]->stream == rc->stream) L = Ls[k];
        if (!L && (L = calloc(1, sizeof *L)) != NULL) {
            *L = (struct launch){.cl = c->cl, .comm = c, .stream = rc->stream, .rank = c->rank,
                                 .p2p = p2p};
            Ls[nL++] = L;
        }
        if (L && L->nparts == L->cap) {
            int cap = L->cap ? 2 * L->cap : 4;
            struct part *x = realloc(L->parts, (size_t)cap * sizeof *x);
            if (x) L->parts = x, L->cap = cap;
        }
        if (!L || L->nparts == L->cap) {
            err = fail(ncclSystemError, "out of host memory launching a group");
            break;
        }
        L->parts[L->nparts++] = rc->p;
    }
    /* A launch on a capturing stream goes into its graph and takes its sequences when it runs. */
    for (size_t k = 0; k < nL && !err; k++) {
        struct launch *L = Ls[k];
        ncclComm_t c = L->comm;
        int ce = rt_is_capturing(L->stream, &L->graph);
        if (ce) {
            err = fail(ncclUnhandledCudaError, "cudaStreamIsCapturing failed with CUDA error %d", ce);
        } else if (L->graph && !c->gsendseq &&
                   (!(c->gsendseq = calloc((size_t)c->n, sizeof *c->gsendseq)) ||
                    !(c->grecvseq = calloc((size_t)c->n, sizeof *c->grecvseq)))) {
            free(c->gsendseq);
            c->gsendseq = NULL;
            err = fail(ncclSystemError, "out of host memory capturing a launch");
        }
    }
    /* Only now, with nothing left to fail but the launch itself, are sequence numbers used up. */
    for (size_t k = 0; k < nL && !err; k++) {
        struct launch *L = Ls[k];
        ncclComm_t c = L->comm;
        if (!L->graph) {
            long long index = (long long)c->launches++;
            L->hang = c->rank == L->cl->hang_rank && index == L->cl->hang_at;
        }
        for (int j = 0; j < L->nparts; j++) {
            struct part *p = &L->parts[j];
            p->corrupt = c->rank == L->cl->corrupt_rank;
            if (L->graph) continue; /* numbered at each run (graph_host_fn) */
            if (p->kind == K_SEND)
                p->seq = c->sendseq[p->peer]++;
            else if (p->kind == K_RECV)
                p->seq = c->recvseq[p->peer]++;
            else
                p->seq = c->seq++;
        }
    }
    for (size_t k = 0; k < nL; k++) {
        struct launch *L = Ls[k];
        if (!err) {
            int graph = L->graph; /* once launched, a plain L is host_fn's to free */
            pthread_mutex_lock(&L->cl->mu);
            L->cl->refs++;
            if (!graph) L->cl->pending[L->rank]++; /* a captured launch is pending when it runs */
            pthread_mutex_unlock(&L->cl->mu);
            if (graph) { /* the communicator keeps it for the graph's launches */
                L->next = L->comm->graphs;
                L->comm->graphs = L;
            }
            int ce = rt_launch(L->stream, graph ? graph_host_fn : host_fn, L);
            if (ce == 0) continue;
            if (graph) L->comm->graphs = L->next;
            err = fail(ncclUnhandledCudaError, "cudaLaunchHostFunc failed with CUDA error %d", ce);
            pthread_mutex_lock(&L->cl->mu); /* the communicator still holds a reference */
            L->cl->refs--;
            if (!graph) L->cl->pending[L->rank]--;
            set_async(L->cl, L->rank, ncclUnhandledCudaError);
            pthread_mutex_unlock(&L->cl->mu);
        }
        free(L->parts);
        free(L);
    }
    free(Ls);
    return err;
}

/* The outermost ncclGroupEnd: inits become cliques, or operations are launched. */
static ncclResult_t flush_group(void) {
    ncclResult_t err = t_group_err;
    size_t ninit = 0;
    for (size_t i = 0; i < t_nrecs; i++) ninit += t_recs[i].p.kind == K_INIT;
    if (!err && ninit && ninit < t_nrecs)
        err = fail(ncclInvalidUsage, "a group cannot mix communicator initialization with collectives or "
                   "send/recv");
    if (!err) err = ninit ? finish_inits() : launch_all();
    for (size_t i = 0; err && i < t_nrecs; i++)
        if (t_recs[i].p.kind == K_INIT && !t_recs[i].comm->cl && !t_recs[i].comm->init_err)
            t_recs[i].comm->init_err = err;
    free(t_recs);
    t_recs = NULL;
    t_nrecs = t_caprecs = 0;
    t_group_err = ncclSuccess;
    return err;
}

/* Appends a line to the trace file, when there is one. */
static void trace(const char *what) {
    if (g_trace) fprintf(g_trace, "%s\n", what);
}

ncclResult_t ncclGroupStart(void) {
    ncclResult_t e = ready();
    if (e) return e;
    trace("ncclGroupStart");
    t_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    ncclResult_t e = ready();
    if (e) return e;
    trace("ncclGroupEnd");
    if (t_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
    return --t_depth > 0 ? ncclSuccess : flush_group();
}

/* ---- Collectives, send, recv --------------------------------------------------------------- */

static ncclResult_t check_buf(const char *fn, const char *what, const void *p, size_t bytes, int dev) {
    if (bytes == 0) return ncclSuccess;
    if (!p) return fail(ncclInvalidArgument, "%s: %s is NULL", fn, what);
    int d = rt_pointer_device(p);
    if (d < 0)
        return fail(ncclInvalidArgument, "%s: %s %p is not device memory (communicator on device %d)", fn,
                    what, p, dev);
    if (d != dev)
        return fail(ncclInvalidArgument, "%s: %s %p is on device %d, communicator on device %d", fn, what, p,
                    d, dev);
    size_t room = rt_pointer_range(p);
    if (room < bytes)
        return fail(ncclInvalidArgument, "%s: %s %p has %zu bytes left in its allocation, the operation "
                    "needs %zu", fn, what, p, room, bytes);
    return ncclSuccess;
}

/* What NCCL checks when an operation is issued (or stricter), first failure wins. */
static ncclResult_t issue_checks(struct part *p, ncclComm_t comm, cudaStream_t stream) {
    const char *fn = kind_name[p->kind];
    ncclResult_t e = ready();
    if (!e && p->kind == K_ALLTOALL) e = need_version(fn, 22803);
    if (!e && IS_P2P(p->kind)) e = need_version(fn, 20703);
    if (!e) e = check_usable(comm);
    if (e) return e;
    int n = comm->n;
    p->rank = comm->rank;
    if (p->type < 0 || p->type >= NTYPES || (p->type == T_BF16 && g_vnorm < 21000))
        return fail(ncclInvalidArgument, "%s: invalid data type %d", fn, p->type);
    if (REDUCES(p->kind) && (p->op < 0 || p->op >= NOPS || (p->op == OP_AVG && g_vnorm < 21000)))
        return fail(ncclInvalidArgument, "%s: invalid reduction operation %d", fn, p->op);
    if (ROOTED(p->kind) && (p->root < 0 || p->root >= n))
        return fail(ncclInvalidArgument, "%s: invalid root %d (nranks %d)", fn, p->root, n);
    if (IS_P2P(p->kind) && (p->peer < 0 || p->peer >= n))
        return fail(ncclInvalidArgument, "%s: invalid peer %d (nranks %d)", fn, p->peer, n);
    int sd = rt_stream_device(stream);
    if (sd < 0)
        return fail(ncclInvalidArgument, "%s: stream %p is not a live stream of the stand-in CUDA runtime "
                    "GPUBENCH_STANDIN_CUDART=%s", fn, (void *)stream, g_cudart);
    if (sd != comm->dev)
        return fail(ncclInvalidArgument, "stream is on device %d, communicator on device %d", sd, comm->dev);
    size_t esz = type_size[p->type];
    if (p->count > SIZE_MAX / esz / (size_t)n)
        return fail(ncclInvalidArgument, "%s: count %zu is too large", fn, p->count);
    size_t one = p->count * esz, all = one * (size_t)n, sendb = one, recvb = one;
    switch (p->kind) {
    case K_BROADCAST: sendb = p->rank == p->root ? one : 0; break; /* only the root's sendbuff is read */
    case K_REDUCE: recvb = p->rank == p->root ? one : 0; break;    /* only the root's recvbuff is written */
    case K_ALLGATHER: recvb = all; break;
    case K_REDUCESCATTER: sendb = all; break;
    case K_ALLTOALL: sendb = recvb = all; break;
    case K_SEND: recvb = 0; break;
    case K_RECV: sendb = 0; break;
    }
    if ((e = check_buf(fn, "sendbuff", p->sendbuf, sendb, comm->dev)) != ncclSuccess ||
        (e = check_buf(fn, "recvbuff", p->recvbuf, recvb, comm->dev)) != ncclSuccess)
        return e;
    if (p->kind == K_ALLTOALL && one > 0 && p->sendbuf == p->recvbuf)
        return fail(ncclInvalidArgument, "ncclAlltoAll: in-place operation is not supported");
    return ncclSuccess;
}

/* Checks an operation, then queues it: at once outside a group, at the outermost ncclGroupEnd in one. */
static ncclResult_t issue(struct part p, ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t e = issue_checks(&p, comm, stream); /* loads the library first */
    trace(kind_name[p.kind]);
    if (!e) e = record(comm, stream, &p);
    if (e || t_depth > 0) return in_group(e);
    return flush_group();
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
                           ncclComm_t comm, cudaStream_t stream) {
    return issue((struct part){.kind = K_ALLREDUCE, .sendbuf = sendbuff, .recvbuf = recvbuff,
                               .count = count, .type = datatype, .op = op}, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    return issue((struct part){.kind = K_BROADCAST, .sendbuf = sendbuff, .recvbuf = recvbuff,
                               .count = count, .type = datatype, .root = root}, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    return issue((struct part){.kind = K_REDUCE, .sendbuf = sendbuff, .recvbuf = recvbuff, .count = count,
                               .type = datatype, .op = op, .root = root}, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    return issue((struct part){.kind = K_ALLGATHER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                               .count = sendcount, .type = datatype}, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype, int op,
                               ncclComm_t comm, cudaStream_t stream) {
    return issue((struct part){.kind = K_REDUCESCATTER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                               .count = recvcount, .type = datatype, .op = op}, comm, stream);
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, int datatype,
                          ncclComm_t comm, cudaStream_t stream) {
    return issue((struct part){.kind = K_ALLTOALL, .sendbuf = sendbuff, .recvbuf = recvbuff, .count = count,
                               .type = datatype}, comm, stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, int datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return issue((struct part){.kind = K_SEND, .sendbuf = sendbuff, .count = count, .type = datatype,
                               .peer = peer}, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, int datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return issue((struct part){.kind = K_RECV, .recvbuf = recvbuff, .count = count, .type = datatype,
                               .peer = peer}, comm, stream);
}

/* ---- Version, unique ids, communicators ---------------------------------------------------- */

/* ncclMemAlloc (2.19): NCCL's cuMem allocation, on the current device; here the runtime's
 * cudaMalloc, since the stand-in runtime has no virtual memory API. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    ncclResult_t e = ready();
    if (!e) e = need_version("ncclMemAlloc", 21900);
    if (e) return e;
    trace("ncclMemAlloc");
    if (!ptr || size == 0) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr %p, size %zu", (void *)ptr, size);
    int ce = rt_malloc(ptr, size);
    return ce ? fail(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc of %zu bytes: error %d", size, ce) : ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr) {
    ncclResult_t e = ready();
    if (!e) e = need_version("ncclMemFree", 21900);
    if (e) return e;
    trace("ncclMemFree");
    int ce = rt_free(ptr);
    return ce ? fail(ncclUnhandledCudaError, "ncclMemFree: cudaFree: error %d", ce) : ncclSuccess;
}

ncclResult_t ncclGetVersion(int *version) {
    ncclResult_t e = ready();
    if (e) return e;
    if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = g_version;
    return ncclSuccess;
}

/* Bytes 0..7: a random clique id; 8..15: a marker that init checks; the rest zero. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    ncclResult_t e = ready();
    if (e) return e;
    if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&g_mu);
    uint64_t x = ++g_idcount * 0x9e3779b97f4a7c15u ^ (uint64_t)ts.tv_sec * 1000000000u ^
                 (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40;
    pthread_mutex_unlock(&g_mu);
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9u, x ^= x >> 27, x *= 0x94d049bb133111ebu; /* splitmix64 */
    x ^= x >> 31;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &x, 8);
    memcpy(id->internal + 8, ID_MAGIC, 8);
    return ncclSuccess;
}

/* One rank's init: the communicator is handed out at once (as NCCL does) and joins its clique at
 * the outermost ncclGroupEnd; its device is the calling thread's current device. */
static ncclResult_t init_rank(const char *fn, ncclComm_t *out, int n, const ncclUniqueId *id, int rank,
                              int blocking) {
    if (!out) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    *out = NULL;
    if (n < 1) return fail(ncclInvalidArgument, "%s: invalid nranks %d", fn, n);
    if (rank < 0 || rank >= n) return fail(ncclInvalidArgument, "Invalid rank requested : %d/%d", rank, n);
    if (memcmp(id->internal + 8, ID_MAGIC, 8) != 0)
        return fail(ncclInvalidArgument, "%s: the unique id was not made by ncclGetUniqueId (passed by "
                    "value?)", fn);
    int dev = -1, ce = rt_get_device(&dev);
    if (ce) return fail(ncclUnhandledCudaError, "%s: cudaGetDevice failed with CUDA error %d", fn, ce);
    struct ncclComm *c = calloc(1, sizeof *c);
    if (c && (!(c->sendseq = calloc((size_t)n, sizeof *c->sendseq)) ||
              !(c->recvseq = calloc((size_t)n, sizeof *c->recvseq)))) {
        free(c->sendseq);
        free(c);
        c = NULL;
    }
    if (!c) return fail(ncclSystemError, "%s: out of host memory", fn);
    memcpy(&c->id, id->internal, 8);
    c->rank = rank, c->n = n, c->dev = dev, c->blocking = blocking;
    ncclResult_t e = record(c, NULL, &(struct part){.kind = K_INIT, .rank = rank});
    if (e) {
        free(c->sendseq);
        free(c->recvseq);
        free(c);
        return e;
    }
    pthread_mutex_lock(&g_mu);
    c->next = g_comms;
    g_comms = c;
    pthread_mutex_unlock(&g_mu);
    *out = c;
    return t_depth > 0 ? ncclSuccess : flush_group();
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    ncclResult_t e = ready();
    return in_group(e ? e : init_rank("ncclCommInitRank", comm, nranks, &commId, rank, 1));
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    void *config) {
    ncclResult_t e = ready();
    if (!e) e = need_version("ncclCommInitRankConfig", 21403);
    int blocking = 1;
    if (!e && config) {
        size_t size;
        unsigned magic;
        int b = INT_MIN; /* NCCL_CONFIG_UNDEF_INT */
        memcpy(&size, config, sizeof size);
        memcpy(&magic, (char *)config + 8, sizeof magic);
        if (size >= 20) memcpy(&b, (char *)config + 16, sizeof b);
        if (magic != CONFIG_MAGIC)
            e = fail(ncclInvalidArgument, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
        else if (b != INT_MIN && b != 0 && b != 1)
            e = fail(ncclInvalidArgument, "Invalid config blocking attribute value %d", b);
        else
            blocking = b != 0;
    }
    return in_group(e ? e : init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, blocking));
}

/* NCCL's own recipe: one unique id, then a group of inits with cudaSetDevice before each. On
 * failure (outside an enclosing group) every comms[i] is freed and set to NULL. */
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    ncclResult_t e = ready();
    if (e) return e;
    if (!comms || ndev < 1)
        return fail(ncclInvalidArgument, "ncclCommInitAll: invalid arguments (comms %p, ndev %d)",
                    (void *)comms, ndev);
    int total = 0, old = 0;
    rt_device_count(&total);
    for (int i = 0; i < ndev; i++) {
        comms[i] = NULL;
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= total)
            return fail(ncclInvalidArgument, "Invalid device %d (totalnDev=%d)", d, total);
    }
    ncclUniqueId id;
    if ((e = ncclGetUniqueId(&id)) != ncclSuccess) return e;
    int outer = t_depth > 0;
    rt_get_device(&old);
    ncclGroupStart();
    for (int i = 0; i < ndev && !e; i++) {
        rt_set_device(devlist ? devlist[i] : i);
        e = in_group(init_rank("ncclCommInitAll", &comms[i], ndev, &id, i, 1));
    }
    ncclResult_t ge = ncclGroupEnd();
    rt_set_device(old);
    if (!e) e = ge;
    for (int i = 0; e && !outer && i < ndev; i++)
        if (comms[i]) {
            comm_release(comms[i], 0);
            comms[i] = NULL;
        }
    return e;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    ncclResult_t e = ready();
    return e ? e : comm ? comm_release(comm, 0) : ncclSuccess;
}

/* Marks the clique aborted: every host function of every rank that waits (or will run) returns
 * at once without moving data, so all streams drain; the other ranks' async error becomes
 * ncclRemoteError (ncclSystemError before 2.13). Then frees comm. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    ncclResult_t e = ready();
    if (!e) e = need_version("ncclCommAbort", 20402);
    return e ? e : comm ? comm_release(comm, 1) : ncclSuccess;
}

/* A blocking communicator waits until its queued operations have run (or the clique is aborted);
 * a non-blocking one returns at once. Either way, no operation may be issued on it afterwards. */
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    ncclResult_t e = ready();
    if (!e) e = need_version("ncclCommFinalize", 21403);
    if (!e) e = check_comm(comm);
    if (e) return e;
    struct clique *cl = comm->cl;
    if (cl && comm->blocking) {
        pthread_mutex_lock(&cl->mu);
        while (cl->pending[comm->rank] > 0 && !cl->aborted) pthread_cond_wait(&cl->cv, &cl->mu);
        pthread_mutex_unlock(&cl->mu);
    }
    comm->finalized = 1;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    ncclResult_t e = ready();
    if (!e) e = need_version("ncclCommGetAsyncError", 20402);
    if (!e) e = check_comm(comm);
    if (e) return e;
    if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    if (!comm->cl) {
        *asyncError = comm->init_err;
        return ncclSuccess;
    }
    pthread_mutex_lock(&comm->cl->mu);
    *asyncError = comm->cl->async[comm->rank];
    pthread_mutex_unlock(&comm->cl->mu);
    return ncclSuccess;
}

static ncclResult_t comm_query(const char *fn, ncclComm_t comm, int *out, int which) {
    ncclResult_t e = ready();
    if (!e) e = check_comm(comm);
    if (e) return e;
    if (!out) return fail(ncclInvalidArgument, "%s: output pointer is NULL", fn);
    *out = which == 0 ? comm->n : which == 1 ? comm->dev : comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t comm, int *count) {
    return comm_query("ncclCommCount", comm, count, 0);
}
ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *device) {
    return comm_query("ncclCommCuDevice", comm, device, 1);
}
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank) {
    return comm_query("ncclCommUserRank", comm, rank, 2);
}

/* ---- Error strings ------------------------------------------------------------------------- */

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) { /* NCCL 2.30's strings */
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* The latest failure of any thread (comm is ignored, as in NCCL). The text is copied for the
 * calling thread, so it stays put until this thread calls ncclGetLastError again. */
const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    pthread_mutex_lock(&g_err_mu);
    memcpy(t_last, g_last, sizeof t_last);
    pthread_mutex_unlock(&g_err_mu);
    return t_last;
}
