/*
 * devcall.c - runs a registry op on a CUDA device: turns the engine's op call
 * (tensors, params, the Philox slice) into the plain-C tide_devcall of
 * device.h, lends the kernel scratch memory from the device's caching
 * allocator, and calls the backend's kernel, which launches the work on the
 * device's stream. The device queue's thread (engine.c) calls this and then
 * learns from a host callback when the device has done it; the op's
 * completion step then raises what the work reported (device.h's
 * tide_devreport: an index out of range is only known on the device).
 */
#include "cuda_loader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* -- reports ---------------------------------------------------------------------------- */

/* Reports live in pinned slabs kept for the process: pinning memory costs far
 * more than an op, and only ops that index take one. A free slot holds the
 * free list's link. */
typedef union report_slot {
    tide_devreport      r;
    union report_slot * next;
} report_slot;

enum { SLAB_SLOTS = 128 };

static pthread_mutex_t      report_lock = PTHREAD_MUTEX_INITIALIZER;
static report_slot *        free_slots;
static void **              slabs;          /* for tide_cuda_free_reports */
static int32_t              n_slabs, cap_slabs;
static const tide_devapi *  slab_api;       /* the backend that pinned them */

static tide_devreport * take_report(const char * op) {
    pthread_mutex_lock(&report_lock);
    if (!free_slots) {
        const tide_devapi * api  = tide_cuda_api();
        void *              slab = NULL;
        if (n_slabs == cap_slabs) {
            int32_t cap = cap_slabs ? 2 * cap_slabs : 8;
            void ** s   = realloc(slabs, (size_t)cap * sizeof *s);
            if (s) slabs = s, cap_slabs = cap;
        }
        if (n_slabs == cap_slabs || api->pinned_alloc(SLAB_SLOTS * sizeof(report_slot), &slab) != TIDE_DEVAPI_OK) {
            pthread_mutex_unlock(&report_lock);
            tide_error_set(TIDE_E_OOM, "%s: no pinned host memory for the device's report", op);
            return NULL;
        }
        slab_api          = api;
        slabs[n_slabs++]  = slab;
        report_slot * sl  = slab;
        for (int32_t i = 0; i < SLAB_SLOTS; i++) {
            sl[i].next = free_slots;
            free_slots = &sl[i];
        }
    }
    report_slot * r = free_slots;
    free_slots      = r->next;
    pthread_mutex_unlock(&report_lock);
    memset(&r->r, 0, sizeof r->r);
    return &r->r;
}

static void give_report(tide_devreport * r) {
    report_slot * sl = (report_slot *)r;
    pthread_mutex_lock(&report_lock);
    sl->next   = free_slots;
    free_slots = sl;
    pthread_mutex_unlock(&report_lock);
}

void tide_cuda_free_reports(void) {
    pthread_mutex_lock(&report_lock);
    for (int32_t i = 0; i < n_slabs; i++) slab_api->pinned_free(slabs[i]);
    free(slabs);
    slabs      = NULL;
    n_slabs    = cap_slabs = 0;
    free_slots = NULL;
    slab_api   = NULL;
    pthread_mutex_unlock(&report_lock);
}

void tide_cuda_drop_report(tide_opcall * c) {
    if (c->dev_report) give_report(c->dev_report);
    c->dev_report = NULL;
}

void tide_cuda_give_report(tide_devreport * r) {
    if (r) give_report(r);
}

tide_status tide_cuda_complete(tide_opcall * c) {
    tide_devreport * r = c->dev_report;
    c->dev_report      = NULL;
    return r ? tide_cuda_raise_report(tide_op_name(c->op), c->out[0]->dev.index, r) : TIDE_OK;
}

tide_status tide_cuda_raise_report(const char * op, int32_t dev, tide_devreport * r) {
    tide_devreport got = *r;   /* the device wrote it before the callback that brought us here */
    give_report(r);
    switch (got.code) {
    case TIDE_DEVREPORT_NONE: return TIDE_OK;
    case TIDE_DEVREPORT_INDEX:
        return tide_error_set(TIDE_E_INDEX, "%s: index %lld is out of range for dimension %d of size %lld (on cuda:%d)",
                              op, (long long)got.value, got.dim + 1, (long long)got.bound, dev);
    case TIDE_DEVREPORT_COUNT:
        return tide_error_set(TIDE_E_VALUE, "%s: the mask changed while the op was pending (%lld true elements, %lld expected) (on cuda:%d)",
                              op, (long long)got.value, (long long)got.bound, dev);
    case TIDE_DEVREPORT_PLANE:
        return tide_error_set(TIDE_E_INDEX, "%s: index %lld is out of range for an input plane of %lldx%lld (on cuda:%d)",
                              op, (long long)got.value, (long long)got.bound, (long long)got.width, dev);
    case TIDE_DEVREPORT_LINALG: return tide_linalg_error(op, got.value, got.bound, got.width, dev);
    case TIDE_DEVREPORT_ZERO_DIVISOR: return tide_zero_divisor_error(op, got.value, dev);
    case TIDE_DEVREPORT_PROBABILITY:
        return tide_error_set(TIDE_E_VALUE, "%s: probability %g is outside [0, 1] (on cuda:%d)", op, got.real, dev);
    default:
        return tide_error_set(TIDE_E_INTERNAL, "%s: the device reported code %d, which this libtide does not know (on cuda:%d)",
                              op, got.code, dev);
    }
}

/* -- launches --------------------------------------------------------------------------- */

/* The scratch blocks one call took; given back when the kernel returns, which
 * is safe because later work on the same stream runs after the kernel. */
enum { MAX_SCRATCH = 8 };
typedef struct {
    tide_devalloc * alloc;
    void *          stream;
    const char *    op;
    tide_opcall *   call;     /* its dev_report takes the call's report */
    tide_devblock * blocks[MAX_SCRATCH];
    int32_t         n;
    bool            failed;   /* a request failed: libtide's error message is the one to report */
    tide_cuda_held * held;    /* a call recorded into a graph: what it takes is kept there */
    void **         dev_report;
} scratch_ctx;

static bool hold(tide_cuda_held * h, tide_devblock * b) {
    if (h->n == h->cap) {
        int32_t           cap = h->cap ? 2 * h->cap : 16;
        tide_devblock **  l   = realloc(h->blocks, (size_t)cap * sizeof *l);
        if (!l) return false;
        h->blocks = l, h->cap = cap;
    }
    h->blocks[h->n++] = b;
    return true;
}

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
    if (s->held && !hold(s->held, b)) {
        s->failed = true;
        tide_error_set(TIDE_E_OOM, "%s: out of memory recording a device graph", s->op);
        return NULL;
    }
    return tide_devblock_ptr(b);
}

static tide_devreport * report(void * ctx) {
    scratch_ctx * s = ctx;
    if (s->call->dev_report || (s->dev_report && *s->dev_report)) {
        s->failed = true;
        tide_error_set(TIDE_E_INTERNAL, "%s: a device kernel asked for a second report", s->op);
        return NULL;
    }
    if (s->held) {   /* recorded: device memory the graph's runs write, which the caller copies out after each */
        tide_devreport * r = scratch(ctx, sizeof(tide_devreport));
        *s->dev_report     = r;
        return r;
    }
    if (!(s->call->dev_report = take_report(s->op))) s->failed = true;
    return s->call->dev_report;
}

tide_devreport * tide_cuda_take_report(const char * op) { return take_report(op); }

void tide_cuda_held_free(tide_cuda_held * h, int32_t dev) {
    tide_devalloc * a = h->n ? tide_cuda_allocator(dev) : NULL;
    for (int32_t i = 0; a && i < h->n; i++) tide_devalloc_free(a, h->blocks[i]);
    free(h->blocks);
    memset(h, 0, sizeof *h);
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

static tide_status launch(tide_opcall * c, tide_cuda_held * held, void ** dev_report, const void * rng_at);

/* Exit handlers run in the reverse order of their registration. The libraries
 * kernels call (cuBLAS and cuBLASLt, cuDNN, cuSOLVER) set themselves up
 * lazily, in a kernel's first call, and may register their teardown there,
 * after libtide registered the engine's drain: at exit, work still queued then
 * ran on torn-down state (seen on an H100: cublasGemmEx in cuBLASLt's
 * heuristics during exit(), from a product queued when a script ended). So
 * after the first launch of each op for each dtype, the drain is registered
 * again, and runs before whatever that launch registered. */
static _Atomic uint32_t launched_once[TIDE_OPS_MAX];   /* bit d: the op ran with outputs of dtype d */

static void drain_after_first_launch(int32_t op, int32_t dtype) {
    if (op < 0 || op >= TIDE_OPS_MAX || dtype < 0 || dtype >= 32) return;
    uint32_t bit = 1u << dtype;
    if (atomic_load_explicit(&launched_once[op], memory_order_relaxed) & bit) return;
    if (!(atomic_fetch_or(&launched_once[op], bit) & bit)) atexit(tide_engine_drain_at_exit);
}

tide_status tide_cuda_launch(tide_opcall * c) { return launch(c, NULL, NULL, NULL); }

tide_status tide_cuda_launch_held(tide_opcall * c, tide_cuda_held * held, void ** dev_report, const void * rng_at) {
    *dev_report = NULL;
    return launch(c, held, dev_report, rng_at);
}

static tide_status launch(tide_opcall * c, tide_cuda_held * held, void ** dev_report, const void * rng_at) {
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
    d.rng_at        = rng_at;
    d.p             = c->p;
    d.flags         = c->dev_flags;
    for (int32_t i = 0; i < c->n_in; i++) to_dev(c->in[i], &d.in[i]);
    for (int32_t i = 0; i < c->n_out; i++) to_dev(c->out[i], &d.out[i]);
    scratch_ctx sc = {.alloc = alloc, .stream = stream, .op = op, .call = c, .held = held, .dev_report = dev_report};
    d.scratch      = scratch;
    d.scratch_ctx  = &sc;
    d.report       = report;
    c->dev_report  = NULL;

    int rc = fn(&d);
    drain_after_first_launch(c->op, c->out[0]->dtype_id);
    if (!held)   /* else the graph's, for its life: its runs use them again */
        for (int32_t i = 0; i < sc.n; i++) tide_devalloc_free(alloc, sc.blocks[i]);
    if (rc == TIDE_DEVAPI_OK) return TIDE_OK;
    if (c->dev_report) {   /* work launched before the failure may still write it */
        api->stream_sync(dev, stream);
        tide_cuda_drop_report(c);
    }
    if (sc.failed) return tide_last_status();
    /* a kernel's own message may name the op already, as CPU kernels' do */
    const char * text  = api->error_text();
    size_t       n     = strlen(op);
    bool         named = strncmp(text, op, n) == 0 && text[n] == ':';
    return tide_error_set(rc == TIDE_DEVAPI_OOM ? TIDE_E_OOM : TIDE_E_DEVICE, "%s%s%s (on cuda:%d)", named ? "" : op,
                          named ? "" : ": ", text, dev);
}
