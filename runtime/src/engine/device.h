/*
 * device.h - what libtide asks of an accelerator backend (libtide_cuda, in
 * runtime/src/cuda/): one table of functions over device memory, streams,
 * events, copies and pinned host memory, in plain C so that nvcc and gcc read
 * it alike. libtide builds its own machinery on top of it (the caching device
 * allocator in devalloc.c, the engine's device queues); the backend keeps no
 * policy of its own. Tests drive the same table with a fake backend on the host.
 */
#ifndef TIDE_DEVICE_H
#define TIDE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the table below changes; libtide refuses a backend built
 * against another version instead of calling through a wrong layout. */
enum { TIDE_DEVAPI_VERSION = 1 };

/* What a backend function returns. On anything but OK the backend keeps a
 * message for its calling thread, which `error_text` returns. */
enum { TIDE_DEVAPI_OK = 0, TIDE_DEVAPI_OOM = 1, TIDE_DEVAPI_ERROR = 2 };

/* Copy directions for copy_async. */
enum { TIDE_COPY_H2D = 1, TIDE_COPY_D2H = 2, TIDE_COPY_D2D = 3 };

/* Streams and events are the backend's handles (cudaStream_t, cudaEvent_t).
 * Every call names its device: the backend makes it current on the calling
 * thread first. */
typedef struct tide_devapi {
    int32_t version;                /* TIDE_DEVAPI_VERSION */
    const char * name;              /* "cuda" */
    /* The number of devices; with none, `reason` says why (never aborts). */
    int32_t (*probe)(char * reason, size_t n);
    const char * (*error_text)(void);

    /* -- memory: raw device allocations (devalloc.c caches them) -- */
    int (*mem_alloc)(int32_t dev, size_t nbytes, void ** out);
    int (*mem_free)(int32_t dev, void * p);
    int (*mem_info)(int32_t dev, size_t * free_bytes, size_t * total_bytes);

    /* -- streams: work on one stream runs in order -- */
    int (*stream_create)(int32_t dev, void ** out);
    int (*stream_destroy)(int32_t dev, void * stream);
    int (*stream_sync)(int32_t dev, void * stream);

    /* -- events: a point in a stream that other streams or the host can wait for -- */
    int (*event_create)(int32_t dev, void ** out);
    int (*event_destroy)(int32_t dev, void * event);
    int (*event_record)(int32_t dev, void * event, void * stream);
    /* 1: everything before the event is done; 0: not yet; -1: error. */
    int (*event_query)(int32_t dev, void * event);
    int (*event_sync)(int32_t dev, void * event);
    /* Later work on `stream` waits for `event` on the device, not on the host. */
    int (*stream_wait_event)(int32_t dev, void * stream, void * event);
    /* fn(arg) runs on a backend thread once everything queued on `stream` before
     * it is done; it must not call the backend. How the engine learns that a
     * device op finished without a host thread blocking on it. */
    int (*host_callback)(int32_t dev, void * stream, void (*fn)(void * arg), void * arg);

    /* -- copies, in stream order; host memory must be pinned for overlap -- */
    int (*copy_async)(int32_t dev, void * dst, const void * src, size_t nbytes, int32_t kind, void * stream);
    int (*pinned_alloc)(size_t nbytes, void ** out);
    int (*pinned_free)(void * p);
} tide_devapi;

/* The symbol a backend library exports: its table, or NULL when it was built
 * for another TIDE_DEVAPI_VERSION than `version`. */
typedef const tide_devapi * (*tide_devapi_get_fn)(int32_t version);

#ifdef __cplusplus
}
#endif

#endif
