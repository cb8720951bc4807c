/*
 * test_nccl_standin.c: checks the NCCL stand-in (nccl_standin.c), a test double for gpubench's
 * tests, on top of the CUDA stand-in. Run by `make -C csrc check`, which links both libraries and
 * sets GPUBENCH_STANDIN_CUDART to the stand-in libcudart it linked. It uses 3 stand-in devices.
 * Prints "N passed, M failed" and exits non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The two libraries' API, declared by hand as gpubench's bindings do. */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaLaunchHostFunc(cudaStream_t, void (*)(void *), void *);

typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { size_t size; unsigned magic, version; int blocking; } ncclConfig_t; /* the 2.14 layout */
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphDestroy(cudaGraph_t);
ncclResult_t ncclGetVersion(int *);
ncclResult_t ncclGetUniqueId(ncclUniqueId *);
ncclResult_t ncclCommInitAll(ncclComm_t *, int, const int *);
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommAbort(ncclComm_t);
ncclResult_t ncclCommFinalize(ncclComm_t);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *);
ncclResult_t ncclCommCount(ncclComm_t, int *);
ncclResult_t ncclCommCuDevice(ncclComm_t, int *);
ncclResult_t ncclCommUserRank(ncclComm_t, int *);
const char *ncclGetErrorString(ncclResult_t);
const char *ncclGetLastError(ncclComm_t);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclBroadcast(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduce(const void *, void *, size_t, int, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclAllGather(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduceScatter(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclAlltoAll(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclSend(const void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclRecv(void *, size_t, int, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclMemAlloc(void **, size_t);
ncclResult_t ncclMemFree(void *);
int gpubenchStandinPointerDevice(const void *);

enum { INT8, UINT8, INT32, UINT32, INT64, UINT64, HALF, FLOAT, DOUBLE, BF16 };
enum { SUM, PROD, MAX, MIN, AVG };
enum { H2D = 1, D2H = 2 };
#define N 3

static int passed, failed;
#define EXPECT(got, want)                                                                     \
    do {                                                                                      \
        long long g_ = (long long)(got), w_ = (long long)(want);                               \
        if (g_ == w_) {                                                                       \
            passed++;                                                                         \
        } else {                                                                              \
            failed++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_, w_); \
        }                                                                                     \
    } while (0)
#define EXPECT_ERR(text) EXPECT(strstr(ncclGetLastError(NULL), (text)) != NULL, 1)

static cudaStream_t st[N];

static void *dalloc(int dev, size_t n) {
    void *p = NULL;
    cudaSetDevice(dev);
    if (cudaMalloc(&p, n)) {
        fprintf(stderr, "cudaMalloc(%zu) on %d failed\n", n, dev);
        exit(2);
    }
    return p;
}
static void put(void *d, const void *h, size_t n) { EXPECT(cudaMemcpy(d, h, n, H2D), 0); }
static void get(void *h, const void *d, size_t n) { EXPECT(cudaMemcpy(h, d, n, D2H), 0); }
static void sync_all(void) {
    for (int r = 0; r < N; r++) EXPECT(cudaStreamSynchronize(st[r]), 0);
}
static void destroy_all(ncclComm_t *c) {
    for (int r = 0; r < N; r++) EXPECT(ncclCommDestroy(c[r]), 0);
}
static void init_all(ncclComm_t *c) { EXPECT(ncclCommInitAll(c, N, NULL), 0); }
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void hf_sleep100ms(void *p) {
    (void)p;
    sleep_ms(100);
}

/* Runs fn in a child process with its own environment (the library reads some settings once). */
static int in_child(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(failed ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void child_no_cudart(void) {
    int v = 0;
    ncclComm_t c[N];
    unsetenv("GPUBENCH_STANDIN_CUDART");
    EXPECT(ncclGetVersion(&v), 2);
    EXPECT_ERR("GPUBENCH_STANDIN_CUDART is not set");
    EXPECT(ncclCommInitAll(c, N, NULL), 2);
    EXPECT(ncclGroupStart(), 2);
}

static void child_bad_cudart(void) {
    int v = 0;
    setenv("GPUBENCH_STANDIN_CUDART", "/nonexistent/libcudart.so.12", 1);
    EXPECT(ncclGetVersion(&v), 2);
    EXPECT_ERR("/nonexistent/libcudart.so.12");
}

/* 2.8.4, old encoding: no ncclAvg, bfloat16, InitRankConfig, AlltoAll; ncclRemoteError is new in 2.13. */
static void child_old_version(void) {
    int v = 0;
    ncclComm_t c[N];
    ncclConfig_t cfg = {sizeof cfg, 0xcafebeef, 21400, 1};
    setenv("GPUBENCH_STANDIN_NCCL_VERSION", "2804", 1);
    EXPECT(ncclGetVersion(&v), 0);
    EXPECT(v, 2804);
    for (int r = 0; r < N; r++) {
        cudaSetDevice(r);
        EXPECT(cudaStreamCreateWithFlags(&st[r], 1), 0);
    }
    void *a = dalloc(0, 64), *b = dalloc(0, 64);
    init_all(c);
    EXPECT(ncclAllReduce(a, b, 4, FLOAT, AVG, c[0], st[0]), 4);
    EXPECT(ncclAllReduce(a, b, 4, BF16, SUM, c[0], st[0]), 4);
    EXPECT(ncclAlltoAll(a, b, 1, FLOAT, c[0], st[0]), 5);
    EXPECT_ERR("ncclAlltoAll is not in NCCL 2.8.4");
    void *m = NULL;
    EXPECT(ncclMemAlloc(&m, 64), 5);
    EXPECT_ERR("ncclMemAlloc is not in NCCL 2.8.4");
    EXPECT(ncclCommInitRankConfig(&c[0], 1, (ncclUniqueId){{0}}, 0, &cfg), 5);
    EXPECT(ncclCommAbort(c[1]), 0);
    ncclResult_t ae = -1;
    EXPECT(ncclCommGetAsyncError(c[0], &ae), 0);
    EXPECT(ae, 2); /* ncclSystemError: 2.8 has no ncclRemoteError */
    EXPECT(ncclAllReduce(a, a, 4, FLOAT, SUM, c[0], st[0]), 2);
    EXPECT(ncclCommAbort(c[0]), 0);
    EXPECT(ncclCommAbort(c[2]), 0);
}

static void child_2_27(void) {
    int v = 0;
    ncclComm_t c[N];
    setenv("GPUBENCH_STANDIN_NCCL_VERSION", "22703", 1);
    EXPECT(ncclGetVersion(&v), 0);
    EXPECT(v, 22703);
    cudaSetDevice(0);
    EXPECT(cudaStreamCreateWithFlags(&st[0], 1), 0);
    void *a = dalloc(0, 64), *b = dalloc(0, 64);
    init_all(c);
    EXPECT(ncclAlltoAll(a, b, 1, FLOAT, c[0], st[0]), 5);
    EXPECT_ERR("needs 2.28.3");
    destroy_all(c);
}

static void test_basics(void) {
    int v = 0;
    EXPECT(ncclGetVersion(&v), 0);
    EXPECT(v, 23007);
    void *m = NULL;
    cudaSetDevice(1);
    EXPECT(ncclMemAlloc(&m, 1000), 0); /* on the current device */
    EXPECT(gpubenchStandinPointerDevice(m), 1);
    EXPECT(ncclMemFree(m), 0);
    EXPECT(ncclMemAlloc(NULL, 8), 4);
    cudaSetDevice(0);
    EXPECT(strcmp(ncclGetErrorString(0), "no error"), 0);
    EXPECT(strcmp(ncclGetErrorString(6), "remote process exited or there was a network error"), 0);
    EXPECT(strcmp(ncclGetErrorString(7), "NCCL operation in progress"), 0);
    EXPECT(strcmp(ncclGetErrorString(99), "unknown result code"), 0);
    EXPECT(ncclGroupEnd(), 5);
    EXPECT(strcmp(ncclGetLastError(NULL), "ncclGroupEnd: not in a group call."), 0);
    EXPECT(ncclGroupStart(), 0);
    EXPECT(ncclGroupStart(), 0);
    EXPECT(ncclGroupEnd(), 0);
    EXPECT(ncclGroupEnd(), 0);
    EXPECT(ncclGroupEnd(), 5);
}

static void test_init(void) {
    ncclComm_t c[N], g[N];
    int devs[N] = {2, 0, 1}, x = -1, dev = -1;
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(ncclCommInitAll(c, N, devs), 0);
    EXPECT(cudaGetDevice(&dev), 0);
    EXPECT(dev, 1); /* ncclCommInitAll restores the caller's device */
    for (int r = 0; r < N; r++) {
        EXPECT(ncclCommCount(c[r], &x), 0);
        EXPECT(x, N);
        EXPECT(ncclCommUserRank(c[r], &x), 0);
        EXPECT(x, r);
        EXPECT(ncclCommCuDevice(c[r], &x), 0);
        EXPECT(x, devs[r]);
        EXPECT(ncclCommGetAsyncError(c[r], &x), 0);
        EXPECT(x, 0);
    }
    destroy_all(c);
    EXPECT(ncclCommCount(c[0], &x), 4); /* destroyed: not a communicator any more */
    EXPECT(ncclCommDestroy(NULL), 0);

    /* The binding's pattern: one group, cudaSetDevice before each init; the device comes from it. */
    ncclUniqueId id;
    ncclConfig_t cfg = {sizeof cfg, 0xcafebeef, 21400, 0}; /* non-blocking */
    EXPECT(ncclGetUniqueId(&id), 0);
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) {
        EXPECT(cudaSetDevice(N - 1 - r), 0);
        EXPECT(ncclCommInitRankConfig(&g[r], N, id, r, &cfg), 0);
    }
    EXPECT(ncclGroupEnd(), 0);
    for (int r = 0; r < N; r++) {
        EXPECT(ncclCommCuDevice(g[r], &x), 0);
        EXPECT(x, N - 1 - r);
        EXPECT(ncclCommGetAsyncError(g[r], &x), 0);
        EXPECT(x, 0);
    }
    destroy_all(g);

    /* Config and argument errors. */
    ncclConfig_t bad = cfg;
    bad.magic = 0x12345678;
    EXPECT(ncclCommInitRankConfig(&g[0], 1, id, 0, &bad), 4);
    EXPECT_ERR("NCCL_CONFIG_INITIALIZER");
    bad = cfg;
    bad.blocking = 5;
    EXPECT(ncclCommInitRankConfig(&g[0], 1, id, 0, &bad), 4);
    EXPECT(ncclCommInitRank(&g[0], N, id, 3), 4);
    EXPECT(ncclCommInitRank(&g[0], N, (ncclUniqueId){{0}}, 0), 4);
    EXPECT_ERR("not made by ncclGetUniqueId");
    int baddev[2] = {0, 5};
    EXPECT(ncclCommInitAll(c, 2, baddev), 4);
    EXPECT_ERR("Invalid device 5");

    /* One rank alone, outside any group, is a clique of one. */
    EXPECT(ncclGetUniqueId(&id), 0);
    EXPECT(cudaSetDevice(2), 0);
    EXPECT(ncclCommInitRank(&g[0], 1, id, 0), 0);
    EXPECT(ncclCommCuDevice(g[0], &x), 0);
    EXPECT(x, 2);
    EXPECT(ncclCommDestroy(g[0]), 0);

    /* Two ranks on one device. */
    int dup[N] = {0, 0, 1};
    EXPECT(ncclCommInitAll(c, N, dup), 5);
    EXPECT(strcmp(ncclGetLastError(NULL), "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"), 0);
    EXPECT(c[0] == NULL && c[1] == NULL && c[2] == NULL, 1);
    EXPECT(ncclGetUniqueId(&id), 0);
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) {
        cudaSetDevice(r == 2 ? 1 : 2);
        EXPECT(ncclCommInitRank(&g[r], N, id, r), 0);
    }
    EXPECT(ncclGroupEnd(), 5);
    EXPECT(strcmp(ncclGetLastError(NULL), "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2"), 0);
    EXPECT(ncclCommGetAsyncError(g[1], &x), 0);
    EXPECT(x, 5);
    EXPECT(ncclAllReduce(NULL, NULL, 0, FLOAT, SUM, g[0], st[2]), 5); /* init failed */
    destroy_all(g);

}

/* Ranks initialized from several threads, one rank per thread, as one rank per process does with
 * NCCL: each init waits for the others, then the ranks run an all-reduce together. A thread's
 * checks are gathered here and made by the main thread, so the counters stay single-threaded. */
enum { TCOUNT = 1024 };
struct trank {
    ncclUniqueId id;
    int rank, nranks, dev, delay_ms;
    float *buf; /* TCOUNT floats on dev, in place */
    ncclComm_t comm;
    ncclResult_t init, op, async;
    int sync, x;
    double waited; /* seconds the init took */
};

static void *trank_run(void *arg) {
    struct trank *t = arg;
    sleep_ms(t->delay_ms);
    cudaSetDevice(t->dev);
    double t0 = now_s();
    t->init = ncclCommInitRank(&t->comm, t->nranks, t->id, t->rank);
    t->waited = now_s() - t0;
    if (t->init || !t->buf) return NULL;
    t->op = ncclAllReduce(t->buf, t->buf, TCOUNT, FLOAT, SUM, t->comm, st[t->dev]);
    t->sync = cudaStreamSynchronize(st[t->dev]);
    ncclCommGetAsyncError(t->comm, &t->async);
    ncclCommUserRank(t->comm, &t->x);
    return NULL;
}

static void test_threads(void) {
    pthread_t th[N];
    struct trank t[N];
    float h[TCOUNT];
    ncclUniqueId id;
    setenv("GPUBENCH_STANDIN_NCCL_JOIN_WAIT", "20", 1);
    EXPECT(ncclGetUniqueId(&id), 0);
    for (int r = 0; r < N; r++) {
        /* Rank r on device N-1-r; the last rank comes 200 ms late, so the others really wait. */
        t[r] = (struct trank){.id = id, .rank = r, .nranks = N, .dev = N - 1 - r, .delay_ms = r == N - 1 ? 200 : 0};
        t[r].buf = dalloc(t[r].dev, sizeof h);
        for (int i = 0; i < TCOUNT; i++) h[i] = (float)(r + 1) * (float)(i % 7);
        put(t[r].buf, h, sizeof h);
    }
    for (int r = 0; r < N; r++) EXPECT(pthread_create(&th[r], NULL, trank_run, &t[r]), 0);
    for (int r = 0; r < N; r++) EXPECT(pthread_join(th[r], NULL), 0);
    for (int r = 0; r < N; r++) {
        EXPECT(t[r].init, 0);
        EXPECT(t[r].op, 0);
        EXPECT(t[r].sync, 0);
        EXPECT(t[r].async, 0);
        EXPECT(t[r].x, r);
        EXPECT(r == N - 1 || t[r].waited >= 0.15, 1); /* the early ranks waited for the late one */
        get(h, t[r].buf, sizeof h);
        int wrong = 0;
        for (int i = 0; i < TCOUNT; i++) wrong += h[i] != 6.0f * (float)(i % 7); /* (1+2+3)·(i%7) */
        EXPECT(wrong, 0);
        EXPECT(ncclCommDestroy(t[r].comm), 0);
        EXPECT(cudaFree(t[r].buf), 0);
    }

    /* A rank that another thread already brought, or its device, or another nranks: refused at
     * once; the rank that waits gives up after GPUBENCH_STANDIN_NCCL_JOIN_WAIT seconds. */
    setenv("GPUBENCH_STANDIN_NCCL_JOIN_WAIT", "1", 1);
    EXPECT(ncclGetUniqueId(&id), 0);
    t[0] = (struct trank){.id = id, .rank = 0, .nranks = N, .dev = 0};
    EXPECT(pthread_create(&th[0], NULL, trank_run, &t[0]), 0);
    sleep_ms(300);
    ncclComm_t g;
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(ncclCommInitRank(&g, N, id, 0), 5);
    EXPECT_ERR("rank 0 initialized twice with one unique id");
    EXPECT(ncclCommDestroy(g), 0);
    EXPECT(cudaSetDevice(0), 0);
    EXPECT(ncclCommInitRank(&g, N, id, 1), 5);
    EXPECT(strcmp(ncclGetLastError(NULL), "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"), 0);
    EXPECT(ncclCommDestroy(g), 0);
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(ncclCommInitRank(&g, 2, id, 1), 5);
    EXPECT_ERR("disagree on nranks (3 and 2)");
    EXPECT(ncclCommDestroy(g), 0);
    EXPECT(pthread_join(th[0], NULL), 0);
    EXPECT(t[0].init, 2);
    EXPECT(t[0].waited >= 0.9 && t[0].waited < 10, 1);
    EXPECT(ncclCommGetAsyncError(t[0].comm, &t[0].async), 0);
    EXPECT(t[0].async, 2);
    EXPECT(ncclCommDestroy(t[0].comm), 0);

    /* Two of three ranks in one group, the third never comes: the group waits, then fails. */
    EXPECT(ncclGetUniqueId(&id), 0);
    ncclComm_t p[2];
    double t0 = now_s();
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < 2; r++) {
        cudaSetDevice(r);
        EXPECT(ncclCommInitRank(&p[r], N, id, r), 0);
    }
    EXPECT(ncclGroupEnd(), 2);
    double waited = now_s() - t0;
    EXPECT(waited >= 0.9 && waited < 10, 1);
    EXPECT_ERR("2 of its 3 ranks after waiting 1 s");
    EXPECT(ncclAllReduce(NULL, NULL, 0, FLOAT, SUM, p[0], st[0]), 5); /* init failed */
    EXPECT(ncclCommAbort(p[0]), 0);
    EXPECT(ncclCommAbort(p[1]), 0);

    /* The rank that comes after the others gave up waits in its turn: nothing of theirs is left. */
    t[2] = (struct trank){.id = id, .rank = 2, .nranks = N, .dev = 2};
    EXPECT(pthread_create(&th[2], NULL, trank_run, &t[2]), 0);
    EXPECT(pthread_join(th[2], NULL), 0);
    EXPECT(t[2].init, 2);
    EXPECT(t[2].waited >= 0.9, 1);
    EXPECT(ncclCommDestroy(t[2].comm), 0);
    unsetenv("GPUBENCH_STANDIN_NCCL_JOIN_WAIT");
}

static uint16_t bits16(float f) { /* exact small values only, for test data */
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)(((x >> 16) & 0x8000) | ((((x >> 23) & 0xff) - 112) << 10) | ((x >> 13) & 0x3ff));
}

/* Every rank's recvbuff after an allreduce of typed data sent[r][0..n). */
static void allreduce_case(ncclComm_t *c, int type, int op, size_t esz, size_t n, const void *sent, const void *want) {
    void *sb[N], *rb[N];
    for (int r = 0; r < N; r++) {
        sb[r] = dalloc(r, n * esz);
        rb[r] = dalloc(r, n * esz);
        put(sb[r], (const char *)sent + r * n * esz, n * esz);
    }
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(sb[r], rb[r], n, type, op, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    char got[256];
    for (int r = 0; r < N; r++) {
        get(got, rb[r], n * esz);
        EXPECT(memcmp(got, want, n * esz), 0);
        cudaFree(sb[r]);
        cudaFree(rb[r]);
    }
}

static void test_allreduce(ncclComm_t *c) {
    float fs[N][4], fw[4];
    for (int i = 0; i < 4; i++) {
        fw[i] = 0;
        for (int r = 0; r < N; r++) fw[i] += fs[r][i] = (float)r + 0.5f * (float)i + 0.1f;
    }
    allreduce_case(c, FLOAT, SUM, 4, 4, fs, fw);
    int8_t is[N][2] = {{100, -100}, {100, -100}, {100, 1}}, iw[2] = {44, 57}; /* 300 and -199 wrap */
    allreduce_case(c, INT8, SUM, 1, 2, is, iw);
    int8_t mw[2] = {100, 1};
    allreduce_case(c, INT8, MAX, 1, 2, is, mw);
    /* Half, rounded at each step: 2048 + 1 = 2049 ties to 2048, twice; the exact sum 2050 is representable. */
    uint16_t hs[N][2] = {{bits16(2048), bits16(1.5f)}, {bits16(1), bits16(2.25f)}, {bits16(1), bits16(0.25f)}};
    uint16_t hw[2] = {bits16(2048), bits16(4)};
    allreduce_case(c, HALF, SUM, 2, 2, hs, hw);
    /* bfloat16: 1 + 2^-8 ties to 1, twice (exact: 1 + 2^-7, 0x3f81). */
    uint16_t bs[N][1] = {{0x3f80}, {0x3b80}, {0x3b80}}, bw[1] = {0x3f80};
    allreduce_case(c, BF16, SUM, 2, 1, bs, bw);
    int32_t as[N][2] = {{7, -7}, {8, -8}, {10, -10}}, aw[2] = {8, -8}; /* 25/3 truncated */
    allreduce_case(c, INT32, AVG, 4, 2, as, aw);
    int32_t ws[N][1] = {{INT32_MAX}, {1}, {1}}, ww[1] = {INT32_MIN + 1}; /* wraps (UBSan would see signed overflow) */
    allreduce_case(c, INT32, SUM, 4, 1, ws, ww);
    double ds[N][1] = {{1.5}, {-2}, {4}}, dw[1] = {-12};
    allreduce_case(c, DOUBLE, PROD, 8, 1, ds, dw);
    uint64_t us[N][1] = {{5}, {UINT64_MAX}, {9}}, uw[1] = {5};
    allreduce_case(c, UINT64, MIN, 8, 1, us, uw);

    /* Zero elements: NULL buffers are fine, and the ranks still meet. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(NULL, NULL, 0, FLOAT, SUM, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();

    /* In place, outside any group (each call is a group of one; the host functions meet). */
    float *b[N], one[4] = {1, 2, 3, 4}, got[4];
    for (int r = 0; r < N; r++) {
        b[r] = dalloc(r, sizeof one);
        put(b[r], one, sizeof one);
    }
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], 4, FLOAT, SUM, c[r], st[r]), 0);
    sync_all();
    for (int r = 0; r < N; r++) {
        get(got, b[r], sizeof got);
        EXPECT(got[3], 12);
        cudaFree(b[r]);
    }
}

/* Captured into CUDA graphs (one per rank's stream): an all-reduce and a send/recv ring run at
 * every launch of the graphs, with fresh rendezvous, between calls made outside them. */
static void test_graphs(ncclComm_t *c) {
    float *b[N], *x[N], *y[N], one[2] = {1, 2}, got[2];
    cudaGraph_t g;
    cudaGraphExec_t ex[N];
    for (int r = 0; r < N; r++) {
        b[r] = dalloc(r, sizeof one), x[r] = dalloc(r, sizeof one), y[r] = dalloc(r, sizeof one);
        put(b[r], one, sizeof one);
        float mine[2] = {(float)r, (float)r};
        put(x[r], mine, sizeof mine);
        EXPECT(cudaSetDevice(r), 0);
        EXPECT(cudaStreamBeginCapture(st[r], 1), 0);
    }
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], 2, FLOAT, SUM, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) {
        EXPECT(ncclSend(x[r], 2, FLOAT, (r + 1) % N, c[r], st[r]), 0);
        EXPECT(ncclRecv(y[r], 2, FLOAT, (r + N - 1) % N, c[r], st[r]), 0);
    }
    EXPECT(ncclGroupEnd(), 0);
    for (int r = 0; r < N; r++) {
        EXPECT(cudaStreamEndCapture(st[r], &g), 0);
        EXPECT(cudaGraphInstantiateWithFlags(&ex[r], g, 0), 0);
        EXPECT(cudaGraphDestroy(g), 0);
        get(got, b[r], sizeof got);
        EXPECT(got[1], 2); /* captured, not run */
    }
    for (int launch = 1; launch <= 2; launch++) {
        for (int r = 0; r < N; r++) EXPECT(cudaGraphLaunch(ex[r], st[r]), 0);
        /* A plain all-reduce between launches takes its own sequence. */
        EXPECT(ncclGroupStart(), 0);
        for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(NULL, NULL, 0, FLOAT, SUM, c[r], st[r]), 0);
        EXPECT(ncclGroupEnd(), 0);
        sync_all();
        for (int r = 0; r < N; r++) {
            get(got, b[r], sizeof got);
            EXPECT(got[1], launch == 1 ? 2 * N : 2 * N * N); /* summed in place, again */
            get(got, y[r], sizeof got);
            EXPECT(got[0], (float)((r + N - 1) % N));
        }
    }
    for (int r = 0; r < N; r++) {
        EXPECT(cudaGraphExecDestroy(ex[r]), 0);
        cudaFree(b[r]);
        cudaFree(x[r]);
        cudaFree(y[r]);
    }
}

static void test_collectives(ncclComm_t *c) {
    enum { C = 4 };
    int32_t *sb[N], *rb[N], h[N * N * C], w[N * N * C];
    for (int r = 0; r < N; r++) {
        sb[r] = dalloc(r, sizeof h);
        rb[r] = dalloc(r, sizeof h);
        for (int i = 0; i < N * N * C; i++) h[i] = r * 1000 + i;
        put(sb[r], h, sizeof h);
    }
    /* AllGather: rank r's chunk lands at r*C everywhere. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllGather(sb[r], rb[r], C, INT32, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int r = 0; r < N; r++) {
        get(h, rb[r], N * C * 4);
        EXPECT(h[0], 0);
        EXPECT(h[C + 1], 1001);
        EXPECT(h[2 * C + 3], 2003);
    }
    /* ReduceScatter: rank r gets the sum of everyone's chunk r. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclReduceScatter(sb[r], rb[r], C, INT32, SUM, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int r = 0; r < N; r++) {
        get(h, rb[r], C * 4);
        EXPECT(h[1], 3000 + 3 * (r * C + 1));
    }
    /* Broadcast from rank 1; non-root ranks pass no sendbuff. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclBroadcast(r == 1 ? sb[r] : NULL, rb[r], C, INT32, 1, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int r = 0; r < N; r++) {
        get(h, rb[r], C * 4);
        EXPECT(h[2], 1002);
    }
    /* Reduce (max) to rank 2; other ranks pass no recvbuff. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclReduce(sb[r], r == 2 ? rb[r] : NULL, C, INT32, MAX, 2, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    get(h, rb[2], C * 4);
    EXPECT(h[3], 2003);
    /* AlltoAll: rank r's chunk j goes to rank j's chunk r. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAlltoAll(sb[r], rb[r], C, INT32, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int j = 0; j < N; j++) {
        get(h, rb[j], N * C * 4);
        for (int r = 0; r < N; r++) EXPECT(h[r * C + 1], r * 1000 + j * C + 1);
    }
    /* A ring of grouped send/recv on one thread: would deadlock if each ran alone. */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) {
        EXPECT(ncclSend(sb[r], C, INT32, (r + 1) % N, c[r], st[r]), 0);
        EXPECT(ncclRecv(rb[r], C, INT32, (r + N - 1) % N, c[r], st[r]), 0);
    }
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int r = 0; r < N; r++) {
        get(h, rb[r], C * 4);
        EXPECT(h[0], ((r + N - 1) % N) * 1000);
    }
    /* All-to-all from grouped sends and recvs to every peer, self included (NCCL before 2.28). */
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++)
        for (int p = 0; p < N; p++) {
            EXPECT(ncclSend(sb[r] + p * C, C, INT32, p, c[r], st[r]), 0);
            EXPECT(ncclRecv(rb[r] + p * C, C, INT32, p, c[r], st[r]), 0);
        }
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int j = 0; j < N; j++) {
        get(w, rb[j], N * C * 4);
        for (int r = 0; r < N; r++) EXPECT(w[r * C + 2], r * 1000 + j * C + 2);
    }
    for (int r = 0; r < N; r++) {
        cudaFree(sb[r]);
        cudaFree(rb[r]);
    }
}

static void test_errors(ncclComm_t *c) {
    float *d0 = dalloc(0, 64), *d1 = dalloc(1, 64), host[16];
    int x = -1;
    EXPECT(ncclAllReduce(d0, d0, 4, FLOAT, SUM, c[0], st[1]), 4);
    EXPECT(strcmp(ncclGetLastError(NULL), "stream is on device 1, communicator on device 0"), 0);
    EXPECT(ncclAllReduce(d0, d0, 4, FLOAT, SUM, c[0], (cudaStream_t)0), 4);
    EXPECT(ncclAllReduce(d1, d0, 4, FLOAT, SUM, c[0], st[0]), 4);
    EXPECT_ERR("is on device 1, communicator on device 0");
    EXPECT(ncclAllReduce(host, d0, 4, FLOAT, SUM, c[0], st[0]), 4);
    EXPECT_ERR("not device memory");
    EXPECT(ncclAllReduce(d0, d0, 17, FLOAT, SUM, c[0], st[0]), 4); /* 68 bytes > 64 */
    EXPECT(ncclAllGather(d0, d0, 8, FLOAT, c[0], st[0]), 4);      /* recvbuff needs 96 bytes */
    EXPECT(ncclAllReduce(d0, d0, 4, 10, SUM, c[0], st[0]), 4);
    EXPECT(ncclAllReduce(d0, d0, 4, FLOAT, 5, c[0], st[0]), 4);
    EXPECT(ncclBroadcast(d0, d0, 4, FLOAT, 3, c[0], st[0]), 4);
    EXPECT(ncclSend(d0, 4, FLOAT, -1, c[0], st[0]), 4);
    EXPECT(ncclAlltoAll(d0, d0, 4, FLOAT, c[0], st[0]), 4);
    EXPECT_ERR("in-place");

    /* Init cannot share a group with operations (NCCL says so); nothing of the group runs. */
    ncclComm_t lone;
    ncclUniqueId id;
    EXPECT(ncclGetUniqueId(&id), 0);
    EXPECT(ncclGroupStart(), 0);
    EXPECT(ncclCommInitRank(&lone, 1, id, 0), 0);
    EXPECT(ncclAllReduce(d0, d0, 4, FLOAT, SUM, c[0], st[0]), 0);
    EXPECT(ncclGroupEnd(), 5);
    EXPECT(ncclCommGetAsyncError(lone, &x), 0);
    EXPECT(x, 5);
    EXPECT(ncclCommDestroy(lone), 0);

    /* A failure inside a group fails ncclGroupEnd, and nothing of the group runs. */
    EXPECT(ncclGroupStart(), 0);
    EXPECT(ncclAllReduce(d0, d0, 4, FLOAT, SUM, c[0], st[0]), 0);
    EXPECT(ncclAllReduce(d1, d1, 4, FLOAT, SUM, c[1], st[0]), 4);
    EXPECT(ncclGroupEnd(), 4);
    for (int r = 0; r < N; r++) EXPECT(cudaStreamQuery(st[r]), 0);
    float ones[4] = {1, 1, 1, 1}, got[4];
    float *b[N] = {d0, d1, dalloc(2, 64)};
    for (int r = 0; r < N; r++) put(b[r], ones, sizeof ones);
    EXPECT(ncclGroupStart(), 0); /* the communicators are still in step */
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], 4, FLOAT, SUM, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    get(got, b[2], sizeof got);
    EXPECT(got[0], 3);

    /* Ranks that disagree: the async error becomes ncclInvalidUsage and no data moves. */
    ncclComm_t m[N];
    init_all(m);
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], r == 1 ? 3 : 4, FLOAT, SUM, m[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    for (int r = 0; r < N; r++) {
        EXPECT(ncclCommGetAsyncError(m[r], &x), 0);
        EXPECT(x, 5);
    }
    EXPECT_ERR("ranks disagree");
    get(got, b[2], sizeof got);
    EXPECT(got[0], 3);
    destroy_all(m);

    /* A blocking Finalize waits for the communicator's queued work: here rank 0's stream is held
     * back 100 ms, so rank 1's allreduce cannot finish before then. Then nothing more may be issued. */
    init_all(m);
    EXPECT(cudaLaunchHostFunc(st[0], hf_sleep100ms, NULL), 0);
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], 4, FLOAT, SUM, m[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    double t0 = now_s();
    EXPECT(ncclCommFinalize(m[1]), 0);
    EXPECT(now_s() - t0 > 0.05, 1);
    get(got, b[1], sizeof got); /* done: 3 + 3 + 3 (the stream itself may still be winding down) */
    EXPECT(got[0], 9);
    EXPECT(ncclAllReduce(b[1], b[1], 4, FLOAT, SUM, m[1], st[1]), 5);
    EXPECT_ERR("finalized");
    sync_all();
    destroy_all(m);
    for (int r = 0; r < N; r++) cudaFree(b[r]);
}

/* GPUBENCH_STANDIN_NCCL_HANG=1@1: rank 1's second launch never completes until abort. */
static void test_hang(void) {
    ncclComm_t c[N];
    float *b[N], v[4] = {1, 1, 1, 1}, got[4];
    int x = -1;
    setenv("GPUBENCH_STANDIN_NCCL_HANG", "1@1", 1);
    init_all(c);
    unsetenv("GPUBENCH_STANDIN_NCCL_HANG");
    for (int r = 0; r < N; r++) {
        b[r] = dalloc(r, sizeof v);
        put(b[r], v, sizeof v);
    }
    for (int k = 0; k < 2; k++) {
        EXPECT(ncclGroupStart(), 0);
        for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], 4, FLOAT, SUM, c[r], st[r]), 0);
        EXPECT(ncclGroupEnd(), 0);
    }
    sleep_ms(200);
    for (int r = 0; r < N; r++) EXPECT(cudaStreamQuery(st[r]), 600);
    EXPECT(ncclCommGetAsyncError(c[0], &x), 0);
    EXPECT(x, 0);
    double t0 = now_s();
    EXPECT(ncclCommAbort(c[1]), 0);
    int idle = 0;
    while (!idle && now_s() - t0 < 1.0) {
        idle = 1;
        for (int r = 0; r < N; r++) idle &= cudaStreamQuery(st[r]) == 0;
        if (!idle) sleep_ms(1);
    }
    EXPECT(idle, 1);
    EXPECT(ncclCommGetAsyncError(c[2], &x), 0);
    EXPECT(x, 6);
    get(got, b[0], sizeof got);
    EXPECT(got[0], 3); /* the first allreduce ran, the hung one moved nothing */
    EXPECT(ncclAllReduce(b[0], b[0], 4, FLOAT, SUM, c[0], st[0]), 6);
    EXPECT(ncclCommAbort(c[0]), 0);
    EXPECT(ncclCommAbort(c[2]), 0);
    for (int r = 0; r < N; r++) cudaFree(b[r]);
}

/* GPUBENCH_STANDIN_NCCL_CORRUPT=2: bit 6 of the first element's last byte of rank 2's results. */
static void test_corrupt(void) {
    ncclComm_t c[N];
    float *b[N], v[4] = {1, 2, 3, 4}, got[4];
    setenv("GPUBENCH_STANDIN_NCCL_CORRUPT", "2", 1);
    init_all(c);
    unsetenv("GPUBENCH_STANDIN_NCCL_CORRUPT");
    for (int r = 0; r < N; r++) {
        b[r] = dalloc(r, sizeof v);
        put(b[r], v, sizeof v);
    }
    EXPECT(ncclGroupStart(), 0);
    for (int r = 0; r < N; r++) EXPECT(ncclAllReduce(b[r], b[r], 4, FLOAT, SUM, c[r], st[r]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    float want = 3;
    unsigned char *wb = (unsigned char *)&want;
    wb[3] ^= 0x40;
    for (int r = 0; r < N; r++) {
        get(got, b[r], sizeof got);
        EXPECT(got[0] == (r == 2 ? want : 3), 1);
        EXPECT(got[1], 6);
    }
    EXPECT(ncclGroupStart(), 0); /* a recv by rank 2 is a result too */
    EXPECT(ncclSend(b[0], 4, FLOAT, 2, c[0], st[0]), 0);
    EXPECT(ncclRecv(b[2], 4, FLOAT, 0, c[2], st[2]), 0);
    EXPECT(ncclGroupEnd(), 0);
    sync_all();
    get(got, b[2], sizeof got);
    EXPECT(got[0] == want, 1);
    destroy_all(c);
    for (int r = 0; r < N; r++) cudaFree(b[r]);
}

int main(void) {
    if (!getenv("GPUBENCH_STANDIN_CUDART")) {
        fprintf(stderr, "set GPUBENCH_STANDIN_CUDART to the stand-in libcudart this test is linked with\n");
        return 2;
    }
    setenv("GPUBENCH_STANDIN_DEVICES", "3", 1);
    /* Children first, before anything initializes either library here. */
    EXPECT(in_child(child_no_cudart), 1);
    EXPECT(in_child(child_bad_cudart), 1);
    EXPECT(in_child(child_old_version), 1);
    EXPECT(in_child(child_2_27), 1);

    for (int r = 0; r < N; r++) {
        EXPECT(cudaSetDevice(r), 0);
        EXPECT(cudaStreamCreateWithFlags(&st[r], 1), 0);
    }
    ncclComm_t c[N];
    test_basics();
    test_init();
    test_threads();
    init_all(c);
    test_allreduce(c);
    test_collectives(c);
    test_graphs(c);
    test_errors(c);
    destroy_all(c);
    test_hang();
    test_corrupt();
    for (int r = 0; r < N; r++) EXPECT(cudaStreamDestroy(st[r]), 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
