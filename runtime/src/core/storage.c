/*
 * storage.c - reference-counted blocks of element memory. A storage is shared
 * by every view of it and by every pending op that reads or writes it; the
 * last release returns the block to the allocator (or to its external owner).
 * Dependency tracking on storages is the engine's business, not this file's.
 */
#include "internal.h"

#include <stdlib.h>
#include <unistd.h>

static tide_status oom(size_t nbytes) {
    return tide_error_set(TIDE_E_OOM, "out of memory: could not allocate %zu bytes on the host", nbytes);
}

static tide_storage * make(size_t nbytes, tide_device dev, bool deferred) {
    if (dev.type != TIDE_DEVICE_CPU) {
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
    if (!deferred && !(s->data = tide_host_alloc(nbytes, &s->capacity))) {
        tide_obj_free(TIDE_OBJ_STORAGE, s);
        oom(nbytes);
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
    if (nbytes > host_memory()) {
        oom(nbytes);
        return NULL;
    }
    return make(nbytes, dev, true);
}

tide_status tide_storage_materialize(tide_storage * s) {
    if (s->data || !s->deferred) return TIDE_OK;
    s->data = tide_host_alloc(s->nbytes, &s->capacity);
    return s->data ? TIDE_OK : oom(s->nbytes);
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
