/*
 * storage.c - reference-counted blocks of element memory. A storage is shared
 * by every view of it and by every pending op that reads or writes it; the
 * last release returns the block to the allocator (or to its external owner).
 * Dependency tracking on storages is the engine's business, not this file's.
 */
#include "internal.h"
#include "../engine/cuda_loader.h"

#include <stdlib.h>
#include <unistd.h>

static tide_status oom(size_t nbytes) {
    return tide_error_set(TIDE_E_OOM, "out of memory: could not allocate %zu bytes on the host", nbytes);
}

/* Memory for s: on the host, or from its CUDA device's caching allocator for
 * the stream (TIDE_STREAM_*) that first writes it: a block is reused on its
 * own stream at once (kernels' scratch is given back before the kernel has
 * run) and on another only once the device is done with it. */
static tide_status allocate(tide_storage * s, int32_t stream_kind) {
    if (s->device.type == TIDE_DEVICE_CPU) return (s->data = tide_host_alloc(s->nbytes, &s->capacity)) ? TIDE_OK
                                                                                                       : oom(s->nbytes);
    int32_t         dev    = s->device.index;
    tide_devalloc * a      = tide_cuda_allocator(dev);
    void *          stream = a ? tide_cuda_stream_of(dev, stream_kind) : NULL;
    if (!stream || !(s->block = tide_devalloc_alloc(a, s->nbytes, stream))) return tide_last_status();
    s->data = tide_devblock_ptr(s->block);
    return TIDE_OK;
}

static tide_storage * make(size_t nbytes, tide_device dev, bool deferred) {
    if (dev.type != TIDE_DEVICE_CPU && dev.type != TIDE_DEVICE_CUDA) {
        tide_error_set(TIDE_E_DEVICE, "storage: device type %d has no allocator in this build", dev.type);
        return NULL;
    }
    tide_storage * s = tide_obj_alloc(TIDE_OBJ_STORAGE, sizeof *s);
    if (!s) {
        oom(nbytes);
        return NULL;
    }
    s->nbytes   = nbytes;
    s->device   = dev;
    s->deferred = deferred;
    atomic_init(&s->refcount, 1);
    if (!deferred && allocate(s, TIDE_STREAM_COMPUTE) != TIDE_OK) {
        tide_obj_free(TIDE_OBJ_STORAGE, s);
        return NULL;
    }
    return s;
}

tide_storage * tide_storage_new(size_t nbytes, tide_device dev) { return make(nbytes, dev, false); }

/* The machine's memory in bytes (SIZE_MAX when unknown). */
static size_t host_memory(void) {
    static atomic_size_t bytes;
    size_t b = atomic_load_explicit(&bytes, memory_order_relaxed);
    if (!b) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        b = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
        atomic_store_explicit(&bytes, b, memory_order_relaxed);
    }
    return b;
}

tide_storage * tide_storage_new_deferred(size_t nbytes, tide_device dev) {
    /* more than the machine has could never be allocated when the op runs:
     * fail now, at the call, as an eager allocation would */
    if (dev.type == TIDE_DEVICE_CPU && nbytes > host_memory()) {
        oom(nbytes);
        return NULL;
    }
    if (dev.type == TIDE_DEVICE_CUDA) {
        tide_devalloc * a = tide_cuda_allocator(dev.index);
        if (!a || tide_devalloc_check_size(a, nbytes) != TIDE_OK) return NULL;
    }
    return make(nbytes, dev, true);
}

tide_status tide_storage_materialize(tide_storage * s, int32_t stream_kind) {
    if (s->data || !s->deferred) return TIDE_OK;
    return allocate(s, stream_kind);
}

void tide_storage_retain(tide_storage * s) {
    atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
}

void tide_storage_release(tide_storage * s) {
    if (!s) return;
    if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
    if (s->block)
        tide_devalloc_free(tide_cuda_allocator(s->device.index), s->block);
    else if (s->capacity)
        tide_host_free(s->data, s->capacity);
    else if (s->free_fn)
        s->free_fn(s->data, s->free_ctx);
    free(s->poison_msg);
    tide_obj_free(TIDE_OBJ_STORAGE, s);
}

size_t  tide_storage_nbytes(const tide_storage * s) { return s->nbytes; }
int32_t tide_storage_refcount(const tide_storage * s) { return atomic_load(&((tide_storage *)s)->refcount); }
