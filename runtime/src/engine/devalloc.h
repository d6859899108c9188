/*
 * devalloc.h - the caching device allocator (devalloc.c), one per device:
 * device memory in blocks cut from large device allocations (segments) and
 * kept for reuse, per stream, as PyTorch's CUDA allocator does. What it knows
 * of the device comes through a tide_devapi table (device.h).
 */
#ifndef TIDE_DEVALLOC_H
#define TIDE_DEVALLOC_H

#include "../core/internal.h"
#include "device.h"

typedef struct tide_devalloc tide_devalloc;
typedef struct tide_devblock tide_devblock;

/* An allocator for device `dev` of `api`, named `name` ("cuda:0") in its
 * messages; NULL when out of host memory. */
TIDE_INTERNAL tide_devalloc * tide_devalloc_new(const tide_devapi * api, int32_t dev, const char * name);
/* Returns every cached segment to the device and frees the allocator; every
 * block it gave must have been freed first (tests, and the end of a process). */
TIDE_INTERNAL void            tide_devalloc_free_all(tide_devalloc * a);

/* A block of at least nbytes for work on `stream`, or NULL with TIDE_E_OOM or
 * TIDE_E_DEVICE set. A freed block is reused by later requests on the stream
 * it was allocated for without waiting: that stream's order keeps its old
 * readers before its new writers. When the device is full, the cache is freed
 * and the request retried once; the error then names the request, what the
 * device has free and what Tide holds. Thread-safe. */
TIDE_INTERNAL tide_devblock * tide_devalloc_alloc(tide_devalloc * a, size_t nbytes, void * stream);
/* TIDE_E_OOM, with the allocator's message, when nbytes is more than the
 * device has in all: a request that could never be met, refused when it is
 * made rather than when the op that was to fill it runs. */
TIDE_INTERNAL tide_status     tide_devalloc_check_size(tide_devalloc * a, size_t nbytes);
TIDE_INTERNAL void *          tide_devblock_ptr(const tide_devblock * b);
/* The stream b was allocated for: where it may be used at once. */
TIDE_INTERNAL void *          tide_devblock_stream(const tide_devblock * b);
/* Notes that work on `stream`, another than the block's own, uses the block:
 * when it is freed, it is reused only after that work is done (an event
 * recorded on `stream` at the free). PyTorch's record_stream rule. */
TIDE_INTERNAL tide_status     tide_devalloc_record_stream(tide_devalloc * a, tide_devblock * b, void * stream);
/* Returns the block to the cache (NULL: no-op). */
TIDE_INTERNAL void            tide_devalloc_free(tide_devalloc * a, tide_devblock * b);
/* Returns every cached segment with no block in use to the device, waiting for
 * the events that hold freed blocks back. */
TIDE_INTERNAL void            tide_devalloc_empty_cache(tide_devalloc * a);
TIDE_INTERNAL void            tide_devalloc_stats(tide_devalloc * a, tide_devmem_stats * out);
TIDE_INTERNAL void            tide_devalloc_reset_peak(tide_devalloc * a);

#endif
