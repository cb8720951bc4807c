// gpubench's NCCL shim: libnccl.so.2 is opened with dlopen and its entry points looked up into a
// table; so are the few CUDA runtime calls it needs (streams, graphs), from the libcudart the CUDA
// binding loaded. Each gn_* helper does one Go-level operation in one C call, so that NCCL groups
// and the current device, both per OS thread, never span two calls. Return codes: 0 success; a
// positive value is an ncclResult_t; a negative value is a cudaError_t, negated.
#ifndef GPUBENCH_NCCL_SHIM_H
#define GPUBENCH_NCCL_SHIM_H

#include <stddef.h>

#define GN_ERR_NOT_LOADED 1000   // no library loaded
#define GN_ERR_NO_SYMBOL 1001    // an optional entry point is missing

enum { GN_ALLREDUCE, GN_ALLGATHER, GN_REDUCESCATTER, GN_BROADCAST, GN_REDUCE, GN_ALLTOALL };

int gn_load(const char *nccl_path, const char *cudart_path, char *err, size_t errlen);
int gn_version(int *version);
// gn_has reports whether an optional feature's entry points loaded (and, for NCCL, its version).
enum { GN_HAS_ALLTOALL, GN_HAS_SENDRECV, GN_HAS_CONFIG, GN_HAS_GRAPH, GN_HAS_MEMALLOC };
int gn_has(int what);
const char *gn_nccl_error_string(int code);
const char *gn_last_error(void);

// gn_comm_init makes one communicator per device and a non-blocking stream on each. The
// communicators are blocking, as nccl-tests makes them; from NCCL 2.28 they are configured with
// nvlinkCentricSched as nccl-tests configures them.
int gn_comm_init(int n, const int *devs, void **comms, void **streams);
// gn_mem_alloc allocates n bytes on device dev with ncclMemAlloc (NCCL 2.19+), as nccl-tests
// allocates its buffers: memory NCCL can register for zero-copy (NVLS in CUDA graphs); gn_mem_free
// releases it.
int gn_mem_alloc(int dev, size_t n, void **ptr);
int gn_mem_free(int dev, void *ptr);
// gn_unique_id writes a new ncclUniqueId (128 bytes) to out.
int gn_unique_id(char *out);
// gn_comm_init_rank makes this process's rank of a communicator spanning processes, on device
// dev, with a non-blocking stream, configured as gn_comm_init's.
int gn_comm_init_rank(int dev, int nranks, const char *id, int rank, void **comm, void **stream);
// gn_comm_destroy destroys the communicators, or aborts them (abort != 0: after any error, since
// a destroy can leave NCCL's group state open on a failed communicator), then the streams.
int gn_comm_destroy(int n, const int *devs, void **comms, void **streams, int abort);
int gn_comm_abort(int n, void **comms);

// gn_collective enqueues one collective on every rank, inside a group when there are several.
int gn_collective(int kind, int n, void **comms, void **streams, void **send, void **recv, size_t count,
                  int dtype, int op, int root);
// gn_sendrecv enqueues a group of sends and receives: op i on rank[i] with peer[i], among the n
// ranks' communicators.
int gn_sendrecv(int n, int nops, void **comms, void **streams, const int *rank, const int *peer, const int *is_send,
                void **buf, size_t count, int dtype);

// gn_query reports, per rank, whether its stream still has work (busy[i] = 1) and the
// communicator's asynchronous error (async[i]); it returns a stream error if one shows.
int gn_query(int n, void **comms, void **streams, int *busy, int *async);

// Timing: gn_event_create makes an event per rank (on its device), gn_record records each on its
// rank's stream; gn_elapsed is cudaEventElapsedTime between two, once both have completed.
int gn_event_create(int n, const int *devs, void **events);
int gn_record(int n, const int *devs, void **streams, void **events);
int gn_elapsed(void *start, void *end, float *ms);
int gn_event_destroy(int n, void **events);

// Graphs: capture every rank's stream, end the captures into instantiated graphs, launch them.
int gn_begin_capture(int n, const int *devs, void **streams);
int gn_end_capture(int n, const int *devs, void **streams, void **execs);
int gn_graph_launch(int n, const int *devs, void **execs, void **streams);
int gn_graph_destroy(int n, void **execs);

#endif
