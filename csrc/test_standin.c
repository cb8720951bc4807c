/*
 * test_standin.c: checks the CUDA runtime stand-in (cudart_standin.c), a test double for
 * gpubench's tests. Run by `make -C csrc check`. It sets its own GPUBENCH_STANDIN_* variables
 * before the first call: 4 devices, 1 MiB each, no peer access between 2 and 3, copies at 1 GB/s.
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

/* The stand-in's API, declared by hand as gpubench's binding does. */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaDeviceGetAttribute(int *, int, int);
cudaError_t cudaDeviceGetPCIBusId(char *, int, int);
cudaError_t cudaGetDeviceProperties_v2(void *, int);
cudaError_t cudaDriverGetVersion(int *);
cudaError_t cudaRuntimeGetVersion(int *);
const char *cudaGetErrorName(cudaError_t);
const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDeviceCanAccessPeer(int *, int, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaDeviceDisablePeerAccess(int);
cudaError_t cudaDeviceGetP2PAttribute(int *, int, int, int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaMemGetInfo(size_t *, size_t *);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t, void *);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *, unsigned);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaDeviceSynchronize(void);
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaStreamIsCapturing(cudaStream_t, int *);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphDestroy(cudaGraph_t);

enum { H2H, H2D, D2H, D2D };
#define MiB ((size_t)1 << 20)

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

static void sleep_ms(double ms) {
    struct timespec ts = {0, (long)(ms * 1e6)};
    nanosleep(&ts, NULL);
}

/* Host functions run by stream workers. */
static void hf_sleep2ms(void *p) { (void)p; sleep_ms(2); }
static void hf_set(void *p) { *(volatile int *)p = 1; }
struct gate { pthread_mutex_t mu; pthread_cond_t cv; int open; };
static void hf_gate(void *p) {
    struct gate *g = p;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}
static void gate_open(struct gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
struct observe { volatile int *flag; int seen; };
static void hf_observe(void *p) { struct observe *o = p; o->seen = *o->flag; }

/* GPUBENCH_STANDIN_DEVICES=0, in a child process (the environment is read once per process). */
static int run_no_device_child(void) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv("GPUBENCH_STANDIN_DEVICES", "0", 1);
        int n = -1;
        void *p;
        EXPECT(cudaGetDeviceCount(&n), 100);
        EXPECT(n, 0);
        EXPECT(cudaSetDevice(0), 100);
        EXPECT(cudaMalloc(&p, 16), 100);
        EXPECT(cudaGetLastError(), 100);
        _exit(failed ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void *thread_device(void *arg) {
    int d = -1;
    cudaGetDevice(&d);
    *(int *)arg = d;
    return NULL;
}

static void test_devices(void) {
    int n = 0, v = 0;
    EXPECT(cudaGetDeviceCount(&n), 0);
    EXPECT(n, 4);
    EXPECT(cudaDriverGetVersion(&v), 0);
    EXPECT(v, 12040);
    EXPECT(cudaRuntimeGetVersion(&v), 0);
    EXPECT(v, 12040);
    EXPECT(cudaDeviceGetAttribute(&v, 16, 0), 0);
    EXPECT(v, 132);
    EXPECT(cudaDeviceGetAttribute(&v, 33, 2), 0);
    EXPECT(v, 0x12);
    EXPECT(cudaDeviceGetAttribute(&v, 75, 1), 0);
    EXPECT(v, 9);
    EXPECT(cudaDeviceGetAttribute(&v, 9999, 1), 1);
    EXPECT(cudaDeviceGetAttribute(&v, 16, 4), 101);
    char bus[16];
    EXPECT(cudaDeviceGetPCIBusId(bus, sizeof bus, 3), 0);
    EXPECT(strcmp(bus, "0000:13:00.0"), 0);
    unsigned char prop[1024];
    memset(prop, 0x5a, sizeof prop);
    EXPECT(cudaGetDeviceProperties_v2(prop, 1), 0);
    EXPECT(strcmp((char *)prop, "gpubench stand-in device 1"), 0);
    EXPECT(prop[256], 0x5a); /* nothing written past name[256] */
    setenv("GPUBENCH_STANDIN_NAME", "NVIDIA H200", 1); /* a dry run names a real GPU */
    EXPECT(cudaGetDeviceProperties_v2(prop, 1), 0);
    EXPECT(strcmp((char *)prop, "NVIDIA H200"), 0);
    char longName[400];
    memset(longName, 'x', sizeof longName - 1);
    longName[sizeof longName - 1] = 0;
    setenv("GPUBENCH_STANDIN_NAME", longName, 1);
    EXPECT(cudaGetDeviceProperties_v2(prop, 1), 0);
    EXPECT(strlen((char *)prop), 255); /* cut to name[256] */
    EXPECT(prop[256], 0x5a);
    unsetenv("GPUBENCH_STANDIN_NAME");

    EXPECT(cudaGetLastError(), 101); /* sticky, from the bad ordinal above */
    EXPECT(cudaSetDevice(4), 101);
    EXPECT(cudaSetDevice(-1), 101);
    EXPECT(cudaPeekAtLastError(), 101);
    EXPECT(cudaGetLastError(), 101);
    EXPECT(cudaGetLastError(), 0);

    /* The current device is per host thread. */
    EXPECT(cudaSetDevice(2), 0);
    int other = -1, mine = -1;
    pthread_t t;
    pthread_create(&t, NULL, thread_device, &other);
    pthread_join(t, NULL);
    EXPECT(other, 0);
    EXPECT(cudaGetDevice(&mine), 0);
    EXPECT(mine, 2);

    EXPECT(strcmp(cudaGetErrorName(704), "cudaErrorPeerAccessAlreadyEnabled"), 0);
    EXPECT(strcmp(cudaGetErrorName(400), "cudaErrorInvalidResourceHandle"), 0);
    EXPECT(strcmp(cudaGetErrorString(705), "peer access has not been enabled"), 0);
    EXPECT(strcmp(cudaGetErrorName(12345), "unrecognized error code"), 0);
}

static void test_peer(void) {
    int can = -1, v = -1;
    EXPECT(cudaDeviceCanAccessPeer(&can, 0, 1), 0);
    EXPECT(can, 1);
    EXPECT(cudaDeviceCanAccessPeer(&can, 2, 3), 0);
    EXPECT(can, 0);
    EXPECT(cudaDeviceCanAccessPeer(&can, 3, 2), 0);
    EXPECT(can, 0);
    EXPECT(cudaDeviceCanAccessPeer(&can, 1, 1), 0);
    EXPECT(can, 0);
    EXPECT(cudaDeviceCanAccessPeer(&can, 0, 4), 101);
    EXPECT(cudaDeviceGetP2PAttribute(&v, 2, 0, 1), 0);
    EXPECT(v, 1);
    EXPECT(cudaDeviceGetP2PAttribute(&v, 2, 2, 3), 0);
    EXPECT(v, 0);
    EXPECT(cudaDeviceGetP2PAttribute(&v, 1, 0, 1), 0);
    EXPECT(v, 0);
    EXPECT(cudaDeviceGetP2PAttribute(&v, 2, 1, 1), 101);
    EXPECT(cudaDeviceGetP2PAttribute(&v, 9, 0, 1), 1);
    cudaGetLastError();

    EXPECT(cudaSetDevice(0), 0);
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), 0);
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), 704);
    EXPECT(cudaPeekAtLastError(), 704);
    EXPECT(cudaGetLastError(), 704);
    EXPECT(cudaGetLastError(), 0);
    EXPECT(cudaDeviceEnablePeerAccess(2, 1), 1);
    EXPECT(cudaDeviceEnablePeerAccess(0, 0), 101);
    EXPECT(cudaDeviceEnablePeerAccess(9, 0), 101);
    EXPECT(cudaSetDevice(2), 0);
    EXPECT(cudaDeviceEnablePeerAccess(3, 0), 217);
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(cudaDeviceDisablePeerAccess(0), 705); /* 0->1 is enabled, 1->0 is not */
    EXPECT(cudaSetDevice(0), 0);
    EXPECT(cudaDeviceDisablePeerAccess(1), 0);
    EXPECT(cudaDeviceDisablePeerAccess(1), 705);
    cudaGetLastError();
}

static void test_memory(void) {
    size_t fr = 0, tot = 0;
    void *a = NULL, *b = NULL, *h = NULL;
    char page[4096];
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(cudaMemGetInfo(&fr, &tot), 0);
    EXPECT(tot, MiB);
    EXPECT(fr, MiB);
    EXPECT(cudaMalloc(&a, MiB / 2), 0);
    EXPECT(cudaMemGetInfo(&fr, &tot), 0);
    EXPECT(fr, MiB / 2);
    EXPECT(cudaMalloc(&b, 3 * MiB / 4), 2);
    EXPECT(cudaGetLastError(), 2);
    EXPECT(cudaMalloc(&b, SIZE_MAX), 2); /* refused before anything is allocated */
    EXPECT(b, 0);
    EXPECT(cudaSetDevice(0), 0); /* another device has its own budget */
    EXPECT(cudaMalloc(&b, 3 * MiB / 4), 0);
    EXPECT(cudaMallocHost(&h, sizeof page), 0);

    EXPECT(cudaMemset(a, 7, sizeof page), 0); /* a is device 1's; the current device is 0 */
    EXPECT(cudaMemcpy(h, a, sizeof page, D2H), 0);
    EXPECT(((unsigned char *)h)[4095], 7);
    memset(page, 9, sizeof page);
    EXPECT(cudaMemcpy(b, page, sizeof page, H2D), 0); /* pageable host source */
    EXPECT(cudaMemcpy(a, b, sizeof page, D2D), 0);    /* across devices, synchronous */
    EXPECT(cudaMemcpy(h, a, sizeof page, D2H), 0);
    EXPECT(((unsigned char *)h)[100], 9);

    EXPECT(cudaMemcpy(a, h, sizeof page, D2H), 1); /* kind does not match the pointers */
    EXPECT(cudaMemcpy(h, page, sizeof page, H2D), 1);
    EXPECT(cudaMemcpy(a, page, sizeof page, 7), 1);
    EXPECT(cudaMemcpy(h, page, sizeof page + 1, H2H), 1); /* past the end of the pinned block */
    EXPECT(cudaMemset(h, 0, 16), 1);                      /* host memory */
    EXPECT(cudaFree(page), 1);
    EXPECT(cudaFree((char *)a + 1), 1);
    EXPECT(cudaFreeHost(a), 1);
    EXPECT(cudaFree(a), 0);
    EXPECT(cudaFree(b), 0);
    EXPECT(cudaFreeHost(h), 0);
    EXPECT(cudaFree(NULL), 0);
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(cudaMemGetInfo(&fr, &tot), 0);
    EXPECT(fr, MiB);
    cudaGetLastError();
}

static void test_streams(void) {
    cudaStream_t s0, s1;
    cudaEvent_t e0, e1, a, b, notime;
    void *d0, *d1, *h;
    const size_t n = 4096;
    float ms = -1;

    EXPECT(cudaSetDevice(0), 0);
    EXPECT(cudaStreamCreateWithFlags(&s0, 1), 0);
    EXPECT(cudaMalloc(&d0, n), 0);
    EXPECT(cudaEventCreate(&e0), 0);
    EXPECT(cudaHostAlloc(&h, n, 0), 0);
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(cudaStreamCreateWithFlags(&s1, 1), 0);
    EXPECT(cudaMalloc(&d1, n), 0);
    EXPECT(cudaEventCreate(&e1), 0);

    /* Misuse: device 0's stream while device 1 is current; event and stream of two devices. */
    EXPECT(cudaMemcpyAsync(d0, h, n, H2D, s0), 400);
    EXPECT(cudaMemsetAsync(d0, 0, n, s0), 400);
    EXPECT(cudaEventRecord(e1, s0), 400);
    EXPECT(cudaEventRecord(e0, s1), 400);
    EXPECT(cudaMemcpyAsync(d1, h, n, H2D, NULL), 400);                   /* stream 0 */
    EXPECT(cudaMemcpyAsync(d1, h, n, H2D, (cudaStream_t)(uintptr_t)2), 400); /* per-thread */
    EXPECT(cudaGetLastError(), 400);

    /* Across devices: cudaMemcpyAsync needs peer access, cudaMemcpyPeerAsync does not. */
    EXPECT(cudaMemsetAsync(d1, 5, n, s1), 0);
    EXPECT(cudaStreamSynchronize(s1), 0);
    EXPECT(cudaSetDevice(0), 0);
    EXPECT(cudaMemcpyAsync(d0, d1, n, D2D, s0), 705);
    EXPECT(cudaMemcpyPeerAsync(d0, 1, d1, 1, n, s0), 1); /* d0 is not device 1's */
    EXPECT(cudaMemcpyPeerAsync(d0, 0, d1, 1, n, s0), 0);
    EXPECT(cudaMemcpyAsync(h, d0, n, D2H, s0), 0);
    EXPECT(cudaStreamSynchronize(s0), 0);
    EXPECT(((unsigned char *)h)[n - 1], 5);
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), 0);
    EXPECT(cudaMemsetAsync(d0, 6, n, s0), 0);
    EXPECT(cudaMemcpyAsync(d1, d0, n, D2D, s0), 0);
    EXPECT(cudaMemcpyAsync(h, d1, n, D2H, s0), 0);
    EXPECT(cudaDeviceSynchronize(), 0);
    EXPECT(((unsigned char *)h)[0], 6);
    EXPECT(cudaDeviceDisablePeerAccess(1), 0);
    cudaGetLastError();

    /* Timing: two records around a host function that sleeps 2 ms, held back by a gate. */
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    EXPECT(cudaEventCreate(&a), 0);
    EXPECT(cudaEventCreate(&b), 0);
    EXPECT(cudaEventCreateWithFlags(&notime, 2), 0);
    EXPECT(cudaEventElapsedTime(&ms, a, b), 400); /* never recorded */
    EXPECT(cudaGetLastError(), 400);
    EXPECT(cudaLaunchHostFunc(s0, hf_gate, &g), 0);
    EXPECT(cudaEventRecord(a, s0), 0);
    EXPECT(cudaLaunchHostFunc(s0, hf_sleep2ms, NULL), 0);
    EXPECT(cudaEventRecord(b, s0), 0);
    EXPECT(cudaEventRecord(notime, s0), 0);
    EXPECT(cudaStreamQuery(s0), 600);
    EXPECT(cudaEventQuery(b), 600);
    EXPECT(cudaEventElapsedTime(&ms, a, b), 600);
    EXPECT(cudaPeekAtLastError(), 0); /* NotReady is not sticky */
    gate_open(&g);
    EXPECT(cudaEventSynchronize(b), 0);
    EXPECT(cudaEventQuery(b), 0);
    EXPECT(cudaEventElapsedTime(&ms, a, b), 0);
    EXPECT(ms >= 1.9f && ms < 1000.0f, 1);
    EXPECT(cudaStreamSynchronize(s0), 0);
    EXPECT(cudaStreamQuery(s0), 0);
    EXPECT(cudaEventElapsedTime(&ms, a, notime), 400);
    EXPECT(cudaEventElapsedTime(&ms, a, e1), 400); /* e1 is device 1's (and never recorded) */

    /* Copies throttled to 1 GB/s: 1 MiB takes about 1 ms. */
    void *big0, *big1;
    EXPECT(cudaMalloc(&big0, MiB / 4), 0);
    EXPECT(cudaMalloc(&big1, MiB / 4), 0);
    EXPECT(cudaEventRecord(a, s0), 0);
    EXPECT(cudaMemcpyAsync(big1, big0, MiB / 4, D2D, s0), 0);
    EXPECT(cudaEventRecord(b, s0), 0);
    EXPECT(cudaEventSynchronize(b), 0);
    EXPECT(cudaEventElapsedTime(&ms, a, b), 0);
    EXPECT(ms >= 0.25f, 1);

    /* Cross-stream ordering: s1 (device 1) waits for an event recorded on s0 (device 0). */
    struct gate g2 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    volatile int flag = 0;
    struct observe obs = {&flag, -1};
    EXPECT(cudaLaunchHostFunc(s0, hf_gate, &g2), 0);
    EXPECT(cudaLaunchHostFunc(s0, hf_set, (void *)&flag), 0);
    EXPECT(cudaEventRecord(e0, s0), 0);
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(cudaStreamWaitEvent(s1, e0, 0), 0);
    EXPECT(cudaLaunchHostFunc(s1, hf_observe, &obs), 0);
    sleep_ms(20);
    EXPECT(cudaStreamQuery(s1), 600);
    EXPECT(obs.seen, -1);
    gate_open(&g2);
    EXPECT(cudaStreamSynchronize(s1), 0);
    EXPECT(obs.seen, 1);

    EXPECT(cudaEventDestroy(a), 0);
    EXPECT(cudaEventDestroy(b), 0);
    EXPECT(cudaEventDestroy(notime), 0);
    EXPECT(cudaEventDestroy(e0), 0);
    EXPECT(cudaEventDestroy(e1), 0);
    EXPECT(cudaStreamDestroy(s0), 0);
    EXPECT(cudaStreamDestroy(s1), 0);
    EXPECT(cudaStreamQuery(s1), 400);
    EXPECT(cudaFree(d0), 0);
    EXPECT(cudaFree(d1), 0);
    EXPECT(cudaFree(big0), 0);
    EXPECT(cudaFree(big1), 0);
    EXPECT(cudaFreeHost(h), 0);
    cudaGetLastError();
}

/* Several threads, each on its own device and stream, chained through events. */
static void *stress(void *arg) {
    int dev = (int)(intptr_t)arg % 4, bad = 0;
    cudaStream_t s;
    cudaEvent_t e;
    void *d, *h;
    bad |= cudaSetDevice(dev) | cudaStreamCreateWithFlags(&s, 1) | cudaEventCreate(&e);
    bad |= cudaMalloc(&d, 1024) | cudaMallocHost(&h, 1024);
    for (int i = 0; i < 50 && !bad; i++) {
        bad |= cudaMemsetAsync(d, i, 1024, s) | cudaMemcpyAsync(h, d, 1024, D2H, s);
        bad |= cudaEventRecord(e, s) | cudaStreamWaitEvent(s, e, 0);
        if (i % 10 == 0)
            bad |= cudaStreamSynchronize(s) | (((unsigned char *)h)[1023] != i);
    }
    bad |= cudaStreamDestroy(s) | cudaEventDestroy(e) | cudaFree(d) | cudaFreeHost(h);
    return (void *)(intptr_t)bad;
}

static void count_up(void *p) { ++*(int *)p; }

/* Capture: work queued on a capturing stream does not run; the graph runs it at every launch,
 * in order. A capturing stream cannot be waited for, nor take an event (stricter than CUDA). */
static void test_graphs(void) {
    cudaStream_t s;
    cudaEvent_t e;
    cudaGraph_t g;
    cudaGraphExec_t x, other;
    void *d, *h;
    int runs = 0, before = 0, st = -1;
    const size_t n = 256;

    EXPECT(cudaSetDevice(0), 0);
    EXPECT(cudaStreamCreateWithFlags(&s, 1), 0);
    EXPECT(cudaEventCreate(&e), 0);
    EXPECT(cudaMalloc(&d, n), 0);
    EXPECT(cudaHostAlloc(&h, n, 0), 0);
    memset(h, 7, n);
    EXPECT(cudaStreamEndCapture(s, &g), 401); /* not capturing */
    EXPECT(cudaStreamBeginCapture(s, 3), 1);
    EXPECT(cudaStreamBeginCapture(NULL, 1), 400);
    EXPECT(cudaLaunchHostFunc(s, count_up, &before), 0); /* queued before the capture: runs */
    EXPECT(cudaStreamBeginCapture(s, 1), 0);
    EXPECT(cudaStreamBeginCapture(s, 1), 401); /* already */
    EXPECT(cudaStreamIsCapturing(s, &st), 0);
    EXPECT(st, 1);
    EXPECT(cudaMemsetAsync(d, 0, n, s), 0);
    EXPECT(cudaMemcpyAsync(d, h, n / 2, H2D, s), 0);
    EXPECT(cudaLaunchHostFunc(s, count_up, &runs), 0);
    EXPECT(cudaStreamSynchronize(s), 900);
    EXPECT(cudaStreamQuery(s), 900);
    EXPECT(cudaEventRecord(e, s), 900);
    EXPECT(cudaStreamWaitEvent(s, e, 0), 900);
    EXPECT(cudaStreamEndCapture(s, &g), 0);
    EXPECT(cudaStreamIsCapturing(s, &st), 0);
    EXPECT(st, 0);
    EXPECT(runs, 0); /* captured, not run */
    EXPECT(cudaStreamSynchronize(s), 0);
    EXPECT(before, 1);
    EXPECT(cudaGraphInstantiateWithFlags(&x, g, 1), 1);
    EXPECT(cudaGraphInstantiateWithFlags(&x, g, 0), 0);
    EXPECT(cudaGraphDestroy(g), 0); /* the instance keeps its own copy */
    unsigned char back[256];
    for (int launch = 1; launch <= 2; launch++) {
        memset(back, 1, n);
        EXPECT(cudaMemcpy(d, back, n, H2D), 0); /* the graph's memset and copy must redo it */
        EXPECT(cudaGraphLaunch(x, s), 0);
        EXPECT(cudaStreamSynchronize(s), 0);
        EXPECT(runs, launch);
        EXPECT(cudaMemcpy(back, d, n, D2H), 0);
        EXPECT(back[0] == 7 && back[n / 2 - 1] == 7 && back[n / 2] == 0 && back[n - 1] == 0, 1);
    }
    /* An instance of device 0 on device 1's stream: refused. */
    cudaStream_t s1;
    EXPECT(cudaSetDevice(1), 0);
    EXPECT(cudaStreamCreateWithFlags(&s1, 1), 0);
    EXPECT(cudaGraphLaunch(x, s1), 1);
    EXPECT(cudaStreamBeginCapture(s1, 0), 0); /* an empty capture, destroyed with its stream */
    EXPECT(cudaStreamEndCapture(s1, &g), 0);
    EXPECT(cudaGraphInstantiateWithFlags(&other, g, 0), 0);
    EXPECT(cudaGraphLaunch(other, s1), 0);
    EXPECT(cudaStreamSynchronize(s1), 0);
    EXPECT(cudaGraphExecDestroy(other), 0);
    EXPECT(cudaGraphDestroy(g), 0);
    EXPECT(cudaStreamBeginCapture(s1, 0), 0);
    EXPECT(cudaStreamDestroy(s1), 0);
    EXPECT(cudaSetDevice(0), 0);
    EXPECT(cudaGraphExecDestroy(x), 0);
    EXPECT(cudaGraphExecDestroy(NULL), 1);
    EXPECT(cudaGetLastError(), 1);
    EXPECT(cudaFree(d), 0);
    EXPECT(cudaFreeHost(h), 0);
    EXPECT(cudaEventDestroy(e), 0);
    EXPECT(cudaStreamDestroy(s), 0);
}

static void test_threads(void) {
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, stress, (void *)(intptr_t)i);
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        EXPECT((intptr_t)r, 0);
    }
}

int main(void) {
    EXPECT(run_no_device_child(), 1); /* before anything initializes the library here */
    setenv("GPUBENCH_STANDIN_DEVICES", "4", 1);
    setenv("GPUBENCH_STANDIN_MEMORY", "1048576", 1);
    setenv("GPUBENCH_STANDIN_NO_P2P", "2-3", 1);
    setenv("GPUBENCH_STANDIN_COPY_GBPS", "1", 1);
    test_devices();
    test_peer();
    test_memory();
    test_streams();
    test_graphs();
    test_threads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
