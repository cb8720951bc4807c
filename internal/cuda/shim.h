// gpubench's CUDA runtime shim: libcudart is opened with dlopen and every entry point is looked up
// into a table; each gb_* helper does one Go-level operation in one C call (setting the current
// device itself, since the current device is per OS thread and goroutines move between threads)
// and returns a cudaError_t value. Declarations are written from the CUDA runtime API facts in
// gpubench's reference notes, not from a toolkit header, so plain gcc builds this.
#ifndef GPUBENCH_CUDA_SHIM_H
#define GPUBENCH_CUDA_SHIM_H

#include <stddef.h>

// Status codes of the shim itself, outside cudaError_t's range.
#define GB_ERR_NOT_LOADED (-1)   // no library loaded
#define GB_ERR_NO_SYMBOL (-2)    // an optional entry point is missing
#define GB_ERR_TIMEOUT (-3)      // copies did not finish in time
#define GB_ERR_NO_MEMORY (-4)    // host malloc failed inside the shim
#define GB_ERR_GATE (-5)         // the copies could not all be enqueued before the gate gave up

// gb_load opens path and fills the function table. On failure it returns 0 and writes the reason
// (dlerror's text, or the missing symbol) into err.
int gb_load(const char *path, char *err, size_t errlen);

// gb_unload closes the library again (when its driver cannot run it).
void gb_unload(void);

const char *gb_error_name(int code);
const char *gb_error_string(int code);

int gb_versions(int *driver, int *runtime);
int gb_device_count(int *n);
// gb_device_info fills what gpubench reports about a device; name may stay empty when the library
// has no usable cudaGetDeviceProperties. On failure *failed names the runtime call that failed.
int gb_device_info(int dev, char *name, size_t namelen, char *busid, size_t buslen, int *cc_major,
                   int *cc_minor, size_t *total_mem, const char **failed);
int gb_mem_info(int dev, size_t *free_bytes, size_t *total_bytes);

int gb_malloc(int dev, void **p, size_t n);
int gb_free(int dev, void *p);
// gb_host_alloc allocates pinned host memory; with a CPU list ("0-55,112-167"), it first moves the
// calling thread onto those CPUs so that the pages are touched, and so placed, on their NUMA node.
int gb_host_alloc(const char *cpus, void **p, size_t n);
int gb_free_host(void *p);
int gb_memset(int dev, void *p, int v, size_t n);
int gb_copy_to_device(int dev, void *dst, const void *src, size_t n);
int gb_copy_from_device(int dev, void *dst, const void *src, size_t n);

int gb_can_access_peer(int dev, int peer, int *can);
int gb_p2p_attr(int dev, int peer, int attr, int *value);
int gb_enable_peer(int dev, int peer);
int gb_disable_peer(int dev, int peer);

// A copy for gb_timed_copies. dst_dev or src_dev is -1 for pinned host memory; issuer is the
// device whose stream issues it.
typedef struct {
  void *dst;
  const void *src;
  size_t bytes;
  int dst_dev, src_dev, issuer, repeat;
} gb_copy;

// gb_timed_copies runs the copies together: each on a stream of its own, all held behind one gate
// until every copy is enqueued, then released at once; each copy's repeats are timed with events on
// its stream. ms[i] receives copy i's elapsed milliseconds. It waits at most timeout_ms.
int gb_timed_copies(int n, const gb_copy *copies, float *ms, int timeout_ms);

#endif
