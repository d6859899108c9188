/*
 * storage.c - reference-counted blocks of element memory. A storage is shared
 * by every view of it and by every pending op that reads or writes it; the
 * last release returns the block to the allocator (or to its external owner).
 * Dependency tracking on storages is the engine's business, not this file's.
 */
#include "internal.h"

#include <stdlib.h>

tide_storage * tide_storage_new(size_t nbytes, tide_device dev) {
    if (dev.type != TIDE_DEVICE_CPU) {
        tide_error_set(TIDE_E_DEVICE, "storage: device type %d has no allocator in this build", dev.type);
        return NULL;
    }
    tide_storage * s = tide_obj_alloc(TIDE_OBJ_STORAGE, sizeof *s);
    if (!s) goto oom;
    s->data = tide_host_alloc(nbytes, &s->capacity);
    if (!s->data) {
        tide_obj_free(TIDE_OBJ_STORAGE, s);
        goto oom;
    }
    s->nbytes = nbytes;
    s->device = dev;
    atomic_init(&s->refcount, 1);
    return s;
oom:
    tide_error_set(TIDE_E_OOM, "out of memory: could not allocate %zu bytes on the host", nbytes);
    return NULL;
}

void tide_storage_retain(tide_storage * s) {
    atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
}

void tide_storage_release(tide_storage * s) {
    if (!s) return;
    if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
    if (s->capacity)
        tide_host_free(s->data, s->capacity);
    else if (s->free_fn)
        s->free_fn(s->data, s->free_ctx);
    free(s->poison_msg);
    tide_obj_free(TIDE_OBJ_STORAGE, s);
}

size_t  tide_storage_nbytes(const tide_storage * s) { return s->nbytes; }
int32_t tide_storage_refcount(const tide_storage * s) { return atomic_load(&((tide_storage *)s)->refcount); }
