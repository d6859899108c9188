/*
 * devcall.c - runs a registry op on a CUDA device: turns the engine's op call
 * (tensors, params, the Philox slice) into the plain-C tide_devcall of
 * device.h, lends the kernel scratch memory from the device's caching
 * allocator, and calls the backend's kernel, which launches the work on the
 * device's stream. The device queue's thread (engine.c) calls this and then
 * learns from a host callback when the device has done it.
 */
#include "cuda_loader.h"

#include <stdio.h>

/* The scratch blocks one call took; given back when the kernel returns, which
 * is safe because later work on the same stream runs after the kernel. */
enum { MAX_SCRATCH = 8 };
typedef struct {
    tide_devalloc * alloc;
    void *          stream;
    const char *    op;
    tide_devblock * blocks[MAX_SCRATCH];
    int32_t         n;
    bool            failed;   /* a request failed: libtide's error message is the one to report */
} scratch_ctx;

static void * scratch(void * ctx, size_t nbytes) {
    scratch_ctx * s = ctx;
    if (s->n == MAX_SCRATCH) {
        s->failed = true;
        tide_error_set(TIDE_E_INTERNAL, "%s: a device kernel asked for more than %d scratch blocks", s->op,
                       MAX_SCRATCH);
        return NULL;
    }
    tide_devblock * b = tide_devalloc_alloc(s->alloc, nbytes ? nbytes : 1, s->stream);
    if (!b) {
        s->failed = true;
        return NULL;
    }
    s->blocks[s->n++] = b;
    return tide_devblock_ptr(b);
}

static void to_dev(const tide_tensor * t, tide_devtensor * d) {
    d->dtype = t->dtype_id;
    d->ndim  = t->ndim;
    d->nelem = t->nelem;
    memcpy(d->sizes, t->sizes, sizeof d->sizes);
    memcpy(d->strides, t->strides, sizeof d->strides);
    d->value  = 0;
    d->ivalue = 0;
    if (t->dev.type == TIDE_DEVICE_CUDA) {
        d->data = t->nelem ? tide_tensor_ptr(t) : NULL;
        return;
    }
    /* a host number given with device tensors: its value goes by value (the
     * engine ran the op that wrote it, so it is there to read) */
    const void * p = tide_tensor_ptr(t);
    d->data        = NULL;
    d->ndim        = 0;
    d->nelem       = 1;
    d->value       = tide_load_double(p, t->dtype_id);
    if (t->dtype_id == TIDE_DTYPE_I64) d->ivalue = *(const int64_t *)p;
    else if (!tide_dtype_is_float(t->dtype_id)) d->ivalue = (int64_t)d->value;   /* exact: an int32, uint8 or bool */
}

tide_status tide_cuda_launch(const tide_opcall * c) {
    const char *        op  = tide_op_name(c->op);
    const tide_devapi * api = tide_cuda_api();
    tide_devkernel_fn   fn  = tide_cuda_kernel(c->op);
    int32_t             dev = c->out[0]->dev.index;
    if (!api || !fn) return tide_error_set(TIDE_E_INTERNAL, "%s: no CUDA kernel to launch", op);
    void *          stream = tide_cuda_stream(dev);
    tide_devalloc * alloc  = stream ? tide_cuda_allocator(dev) : NULL;
    if (!alloc) return tide_last_status();

    tide_devcall d;
    d.op            = op;
    d.dev           = dev;
    d.stream        = stream;
    d.n_in          = c->n_in;
    d.n_out         = c->n_out;
    d.compute_dtype = c->compute_dtype;
    d.rng_seed      = c->rng_seed;
    d.rng_offset    = c->rng_offset;
    d.p             = c->p;
    d.flags         = c->dev_flags;
    for (int32_t i = 0; i < c->n_in; i++) to_dev(c->in[i], &d.in[i]);
    for (int32_t i = 0; i < c->n_out; i++) to_dev(c->out[i], &d.out[i]);
    scratch_ctx sc = {.alloc = alloc, .stream = stream, .op = op};
    d.scratch      = scratch;
    d.scratch_ctx  = &sc;

    int rc = fn(&d);
    for (int32_t i = 0; i < sc.n; i++) tide_devalloc_free(alloc, sc.blocks[i]);
    if (rc == TIDE_DEVAPI_OK) return TIDE_OK;
    if (sc.failed) return tide_last_status();
    /* a kernel's own message may name the op already, as CPU kernels' do */
    const char * text  = api->error_text();
    size_t       n     = strlen(op);
    bool         named = strncmp(text, op, n) == 0 && text[n] == ':';
    return tide_error_set(rc == TIDE_DEVAPI_OOM ? TIDE_E_OOM : TIDE_E_DEVICE, "%s%s%s (on cuda:%d)", named ? "" : op,
                          named ? "" : ": ", text, dev);
}
