/*
 * transfer.c - copies between the host and a CUDA device, and between CUDA
 * devices, as engine tasks of the (destination) device's queue: the `copy` op
 * when its input and its destination are on either side. The host side goes through pinned staging memory, so that the
 * device copies asynchronously while the queue goes on: to the device, the
 * queue's thread converts the source into staging (dtype, strides,
 * broadcasting: the CPU copy kernel) and launches the copy; from the device,
 * it launches the copy into staging and, when the device is done, converts
 * staging into the destination. The device side is the span of its view: a
 * strided source comes whole and is gathered on the host; a strided
 * destination is written by the registry through a dense temporary and the
 * device's copy kernel.
 */
#include "transfer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* -- pinned staging, cached -------------------------------------------------------------- */

/* Pinning host memory costs far more than a small copy (and freeing it waits
 * for the whole device), so staging blocks are kept once their copy is done,
 * in power-of-two classes from 64 KiB, each free block holding the link to
 * the next. Free blocks beyond STAGING_KEEP bytes go back to the backend. */
enum { CLASS_MIN = 16, CLASS_COUNT = 48 };
#define STAGING_KEEP ((size_t)512 << 20)

static pthread_mutex_t     staging_lock = PTHREAD_MUTEX_INITIALIZER;
static void *              free_blocks[CLASS_COUNT];
static size_t              kept_bytes;
static const tide_devapi * staging_api;   /* the backend that pinned the kept blocks */

static int32_t class_of(size_t bytes) {
    int32_t k = CLASS_MIN;
    while (k < CLASS_COUNT - 1 && ((size_t)1 << k) < bytes) k++;
    return k;
}

/* A block of at least `bytes` (its class's size in *cap); NULL with the error set. */
static void * staging_take(size_t bytes, size_t * cap) {
    int32_t k = class_of(bytes);
    *cap      = (size_t)1 << k;
    if (*cap < bytes) {
        tide_error_set(TIDE_E_OOM, "copy: %zu bytes is more than one staging block holds", bytes);
        return NULL;
    }
    pthread_mutex_lock(&staging_lock);
    void * p = free_blocks[k];
    if (p) {
        free_blocks[k] = *(void **)p;
        kept_bytes -= *cap;
    }
    pthread_mutex_unlock(&staging_lock);
    if (p) return p;
    const tide_devapi * api = tide_cuda_api();
    if (api->pinned_alloc(*cap, &p) != TIDE_DEVAPI_OK) {
        tide_error_set(TIDE_E_OOM, "copy: could not allocate %zu bytes of pinned host memory: %s", *cap,
                       api->error_text());
        return NULL;
    }
    return p;
}

static void staging_give(void * p, size_t cap) {
    const tide_devapi * api = tide_cuda_api();
    pthread_mutex_lock(&staging_lock);
    if (kept_bytes + cap <= STAGING_KEEP && (!staging_api || staging_api == api)) {
        int32_t k      = class_of(cap);
        *(void **)p    = free_blocks[k];
        free_blocks[k] = p;
        kept_bytes += cap;
        staging_api = api;
        p           = NULL;
    }
    pthread_mutex_unlock(&staging_lock);
    if (p) api->pinned_free(p);
}

void tide_transfer_free_staging(void) {
    pthread_mutex_lock(&staging_lock);
    for (int32_t k = 0; k < CLASS_COUNT; k++)
        while (free_blocks[k]) {
            void * p       = free_blocks[k];
            free_blocks[k] = *(void **)p;
            staging_api->pinned_free(p);
        }
    kept_bytes  = 0;
    staging_api = NULL;
    pthread_mutex_unlock(&staging_lock);
}

/* -- the copies --------------------------------------------------------------------------- */

/* The span of s's storage that view t reaches, in elements from t's offset
 * (0 for an empty view). */
static int64_t span(const tide_tensor * t) {
    if (t->nelem == 0) return 0;
    int64_t hi = 0;
    for (int32_t i = 0; i < t->ndim; i++) hi += (t->sizes[i] - 1) * t->strides[i];
    return hi + 1;
}

/* A copy between two CUDA devices moves bytes only: dense on both sides. */
static bool peer(const tide_opcall * c) {
    return c->in[0]->dev.type == TIDE_DEVICE_CUDA && c->out[0]->dev.type == TIDE_DEVICE_CUDA;
}

tide_status tide_transfer_check(const tide_opcall * c) {
    const tide_tensor * in = c->in[0], * out = c->out[0];
    if (peer(c) && (!tide_tensor_is_contiguous(in) || in->dtype_id != out->dtype_id || in->nelem != out->nelem ||
                    in->ndim != out->ndim)) {
        char a[32], b[32], sa[64], sb[64];
        return tide_error_set(TIDE_E_DEVICE,
                              "copy: from %s to %s moves a contiguous tensor of the destination's dtype and shape, got "
                              "%s %s%s into %s %s (convert it on %s first: contiguous(), to(dtype))",
                              tide_device_format(in->dev, a, sizeof a), tide_device_format(out->dev, b, sizeof b),
                              tide_dtype_name(in->dtype_id), tide_shape_str(in, sa, sizeof sa),
                              tide_tensor_is_contiguous(in) ? "" : " (not contiguous)", tide_dtype_name(out->dtype_id),
                              tide_shape_str(out, sb, sizeof sb), a);
    }
    return TIDE_OK;
}

/* A host tensor viewing `view`'s elements in staging memory that holds its
 * span from its offset; NULL with the error set. */
static tide_tensor * staged(const tide_tensor * view, void * staging) {
    return tide_tensor_from_blob(staging, view->ndim, view->sizes, view->strides, view->dtype_id, NULL, NULL);
}

/* Runs the CPU copy kernel from `in` into `out` (both on the host). */
static tide_status host_copy(tide_tensor * in, tide_tensor * out) {
    tide_op_prepared r;
    TIDE_CHECK(tide_op_prepare(TIDE_OP_copy, &in, 1, NULL, out, &r));
    return r.kernel(&r.c);
}

static void release_staging(tide_transfer * x) {
    if (x->staging) staging_give(x->staging, x->cap);
    x->staging = NULL;
}

/* Copies from the host go on the device's copy stream, to overlap its
 * kernels; the rest (to the host, between devices) on its compute stream,
 * after the ops whose results they read, whose completions (and failures
 * found there) come before theirs. */
static int32_t stream_kind(const tide_opcall * c) {
    return c->in[0]->dev.type == TIDE_DEVICE_CPU ? TIDE_STREAM_COPY : TIDE_STREAM_COMPUTE;
}

/* Staging is allocated here and freed by complete(), which follows every
 * successful launch (or by drop, when the device failed first). */
static tide_status launch(void * ctx) {
    tide_transfer *     x   = ctx;
    tide_tensor *       in  = x->c.in[0], * out = x->c.out[0];
    const tide_devapi * api = tide_cuda_api();
    bool                h2d = out->dev.type == TIDE_DEVICE_CUDA;
    int32_t             dev = h2d ? out->dev.index : in->dev.index;
    void *              stream = tide_cuda_stream_of(dev, stream_kind(&x->c));
    if (!stream) return tide_last_status();
    const tide_tensor * dview = h2d ? out : in;   /* the device side: dense from its offset */
    x->bytes = (size_t)span(dview) * tide_esize(dview->dtype_id);
    if (x->bytes == 0) return TIDE_OK;
    if (peer(&x->c)) {   /* on the destination's stream, once the source's writers are done */
        if (api->copy_peer(dev, tide_tensor_ptr(out), in->dev.index, tide_tensor_ptr(in), x->bytes, stream) !=
            TIDE_DEVAPI_OK)
            return tide_error_set(TIDE_E_DEVICE, "copy: from cuda:%d to cuda:%d failed: %s", in->dev.index, dev,
                                  api->error_text());
        return TIDE_OK;
    }
    if (!(x->staging = staging_take(x->bytes, &x->cap))) return tide_last_status();
    char * dptr = (char *)tide_tensor_ptr(dview);
    if (h2d && out->storage->block && tide_devblock_stream(out->storage->block) != stream) {
        /* a block allocated for the compute stream (a tensor made before the
         * copy) may be one a kernel there has just given back as scratch:
         * this stream writes it only after what that stream was given */
        tide_status st = tide_cuda_wait_stream(dev, TIDE_STREAM_COPY, TIDE_STREAM_COMPUTE, "copy");
        if (st != TIDE_OK) {
            release_staging(x);
            return st;
        }
    }
    if (h2d) {
        tide_tensor * s  = staged(out, x->staging);
        tide_status   st = s ? host_copy(in, s) : tide_last_status();
        tide_tensor_release(s);
        if (st == TIDE_OK && api->copy_async(dev, dptr, x->staging, x->bytes, TIDE_COPY_H2D, stream) != TIDE_DEVAPI_OK)
            st = tide_error_set(TIDE_E_DEVICE, "copy: to cuda:%d failed: %s", dev, api->error_text());
        if (st != TIDE_OK) release_staging(x);
        return st;
    }
    if (api->copy_async(dev, x->staging, dptr, x->bytes, TIDE_COPY_D2H, stream) != TIDE_DEVAPI_OK) {
        release_staging(x);
        return tide_error_set(TIDE_E_DEVICE, "copy: from cuda:%d failed: %s", dev, api->error_text());
    }
    return TIDE_OK;
}

/* The device is done: a copy to the host converts staging into its destination. */
static tide_status complete(void * ctx) {
    tide_transfer * x  = ctx;
    tide_tensor *   in = x->c.in[0], * out = x->c.out[0];
    tide_status     st = TIDE_OK;
    if (x->staging && out->dev.type == TIDE_DEVICE_CPU) {
        tide_tensor * s = staged(in, x->staging);
        st              = s ? host_copy(s, out) : tide_last_status();
        tide_tensor_release(s);
    }
    release_staging(x);
    return st;
}

static void keep(void * ctx) {
    tide_transfer * x = ctx;
    tide_tensor_retain(x->c.in[0]);
    tide_tensor_retain(x->c.out[0]);
}

static void drop(void * ctx) {
    tide_transfer * x = ctx;
    release_staging(x);
    tide_tensor_release(x->c.in[0]);
    tide_tensor_release(x->c.out[0]);
}

static void describe(const void * ctx, char * buf, size_t n) {
    const tide_transfer * x = ctx;
    char a[32], b[32], sh[128];
    snprintf(buf, n, "%s %s, %s -> %s", tide_dtype_name(x->c.in[0]->dtype_id), tide_shape_str(x->c.in[0], sh, sizeof sh),
             tide_device_format(x->c.in[0]->dev, a, sizeof a), tide_device_format(x->c.out[0]->dev, b, sizeof b));
}

void tide_transfer_task(tide_transfer * x, const tide_opcall * c, tide_engine_task * task) {
    x->c       = *c;
    x->staging = NULL;
    x->bytes   = 0;
    x->cap     = 0;
    *task = (tide_engine_task){launch,   x, sizeof *x, keep, drop, "copy", c->out[0]->nelem, describe, complete,
                               stream_kind(c)};
}
