/* fake_device.h - a tide_devapi (engine/device.h) over host memory, for tests
 * of what libtide builds on a device backend without a GPU. Device memory is
 * malloc'd up to a capacity the test sets. Work queued on a stream (copies,
 * host callbacks, event records) is done only when the test says so with
 * fake_stream_finish(), so a test decides what the "device" has finished
 * (or at once, with fake.autorun set). Kernels are the CPU's; the kernels
 * libtide writes at run time (rtc_compile) are built by the host's C++
 * compiler ($CXX, else c++) with a prelude that makes their CUDA host code. */
#ifndef TIDE_TEST_FAKE_DEVICE_H
#define TIDE_TEST_FAKE_DEVICE_H

#include "core/internal.h"
#include "engine/device.h"
#include "ops/cpu/kernels.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A recorded graph: kernels (their calls, with the report memory each took
 * while recorded) and copies, run in order at each launch. */
typedef struct {
    int              copy;
    int32_t          kind;           /* a copy's direction */
    void *           rtc_fn;         /* a launch of a run-time compiled kernel, with its parameter */
    void *           rtc_arg;
    tide_devcall     call;
    tide_devreport * rep;
    void *           dst;
    const void *     src;
    size_t           n;
} fake_node;

typedef struct fake_graph {
    fake_node * nodes;
    int         n, cap;
} fake_graph;

typedef struct fake_stream {
    int64_t queued, finished;        /* work items put on it, and finished */
    struct { int64_t at; void (*fn)(void *); void * arg; } cb[64];
    int     n_cb;
    fake_graph * capturing;          /* between capture_begin and capture_end */
} fake_stream;

typedef struct { fake_stream * s; int64_t at; } fake_event;

static struct {
    pthread_mutex_t lock;
    size_t          capacity, used;  /* device memory */
    int64_t         n_mallocs, n_frees, n_syncs;
    char            error[1024];
    int             autorun;         /* work is done as soon as it is queued */
    int             no_kernels;      /* kernel() finds none (set before tide_cuda_use_backend) */
    int64_t         n_kernels;       /* kernels launched */
    int64_t         n_pinned;        /* pinned allocations made */
    int32_t         n_devices;       /* probe's count (0 taken as 1; set before tide_cuda_use_backend) */
    int64_t         n_peer;          /* copies between devices */
    int64_t         n_callbacks;     /* host callbacks queued */
    int64_t         n_waits;         /* streams made to wait for an event */
    void *          last_scratch;    /* the scratch the last kernel took */
    int64_t         n_captures;      /* graphs recorded */
    int64_t         n_graph_launches;
    int             no_capture;      /* capture_end fails (as for a kernel a graph cannot hold) */
    int             no_rtc;          /* rtc_compile fails, as where NVRTC is missing */
    int64_t         n_rtc_compiles;  /* kernels compiled at run time */
    int64_t         n_rtc_launches;
} fake = {PTHREAD_MUTEX_INITIALIZER, 64 << 20, 0, 0, 0, 0, "", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0, 0, 0};

static int fake_record(fake_stream * s, fake_node nd) {
    fake_graph * g = s->capturing;
    if (g->n == g->cap) {
        int         cap = g->cap ? 2 * g->cap : 16;
        fake_node * l   = realloc(g->nodes, (size_t)cap * sizeof *l);
        if (!l) return TIDE_DEVAPI_OOM;
        g->nodes = l, g->cap = cap;
    }
    g->nodes[g->n++] = nd;
    return TIDE_DEVAPI_OK;
}

/* The live "device" allocations, so that a copy can check that its direction
 * says where its memory is, as a GPU's would fail when it does not. */
static struct {
    char ** at;
    size_t * n;
    int      len, cap;
} fake_blocks;

static void fake_block_add(char * p, size_t n) {   /* under fake.lock */
    if (fake_blocks.len == fake_blocks.cap) {
        int cap = fake_blocks.cap ? 2 * fake_blocks.cap : 256;
        fake_blocks.at = realloc(fake_blocks.at, (size_t)cap * sizeof *fake_blocks.at);
        fake_blocks.n  = realloc(fake_blocks.n, (size_t)cap * sizeof *fake_blocks.n);
        fake_blocks.cap = cap;
    }
    fake_blocks.at[fake_blocks.len] = p, fake_blocks.n[fake_blocks.len] = n, fake_blocks.len++;
}

static void fake_block_drop(char * p) {   /* under fake.lock */
    for (int i = 0; i < fake_blocks.len; i++)
        if (fake_blocks.at[i] == p) {
            fake_blocks.len--;
            fake_blocks.at[i] = fake_blocks.at[fake_blocks.len], fake_blocks.n[i] = fake_blocks.n[fake_blocks.len];
            return;
        }
}

/* Whether p is inside a live device allocation. */
static bool fake_on_device(const void * p) {
    const char * c  = p;
    bool         in = false;
    pthread_mutex_lock(&fake.lock);
    for (int i = 0; i < fake_blocks.len && !in; i++)
        in = c >= fake_blocks.at[i] && c < fake_blocks.at[i] + (fake_blocks.n[i] ? fake_blocks.n[i] : 1);
    pthread_mutex_unlock(&fake.lock);
    return in;
}

/* Each allocation is preceded by its size, to give `used` back on free. */
static int fake_mem_alloc(int32_t dev, size_t n, void ** out) {
    pthread_mutex_lock(&fake.lock);
    int rc = TIDE_DEVAPI_OK;
    if (fake.used + n > fake.capacity) {
        snprintf(fake.error, sizeof fake.error, "fake: %zu bytes do not fit", n);
        rc = TIDE_DEVAPI_OOM;
    } else {
        size_t * p = malloc(n + 64);
        p[0]       = n;
        *out       = (char *)p + 64;
        fake.used += n;
        fake.n_mallocs++;
        fake_block_add(*out, n);
    }
    pthread_mutex_unlock(&fake.lock);
    return rc;
}

static int fake_mem_free(int32_t dev, void * p) {
    size_t * h = (size_t *)((char *)p - 64);
    pthread_mutex_lock(&fake.lock);
    fake.used -= h[0];
    fake.n_frees++;
    fake_block_drop(p);
    pthread_mutex_unlock(&fake.lock);
    free(h);
    return TIDE_DEVAPI_OK;
}

static int fake_mem_info(int32_t dev, size_t * f, size_t * t) {
    pthread_mutex_lock(&fake.lock);
    *f = fake.capacity - fake.used;
    *t = fake.capacity;
    pthread_mutex_unlock(&fake.lock);
    return TIDE_DEVAPI_OK;
}

static int fake_stream_create(int32_t dev, void ** out) {
    *out = calloc(1, sizeof(fake_stream));
    return TIDE_DEVAPI_OK;
}

/* Finishes everything queued on s so far, running its callbacks in order. */
static void fake_stream_finish(fake_stream * s) {
    struct { void (*fn)(void *); void * arg; } run[64];
    pthread_mutex_lock(&fake.lock);
    s->finished = s->queued;
    int n = s->n_cb;
    for (int i = 0; i < n; i++) run[i].fn = s->cb[i].fn, run[i].arg = s->cb[i].arg;
    s->n_cb = 0;
    pthread_mutex_unlock(&fake.lock);
    for (int i = 0; i < n; i++) run[i].fn(run[i].arg);
}

static int fake_stream_destroy(int32_t dev, void * s) {
    fake_stream_finish(s);
    free(s);
    return TIDE_DEVAPI_OK;
}

static int fake_stream_sync(int32_t dev, void * s) {
    fake.n_syncs++;
    fake_stream_finish(s);
    return TIDE_DEVAPI_OK;
}

static int fake_event_create(int32_t dev, void ** out) {
    *out = calloc(1, sizeof(fake_event));
    return TIDE_DEVAPI_OK;
}

static int fake_event_destroy(int32_t dev, void * e) {
    free(e);
    return TIDE_DEVAPI_OK;
}

static int fake_event_record(int32_t dev, void * e, void * s) {
    pthread_mutex_lock(&fake.lock);
    fake_event * ev = e;
    ev->s  = s;
    ev->at = ((fake_stream *)s)->queued;
    pthread_mutex_unlock(&fake.lock);
    return TIDE_DEVAPI_OK;
}

static int fake_event_query(int32_t dev, void * e) {
    pthread_mutex_lock(&fake.lock);
    fake_event * ev = e;
    int done = !ev->s || ev->s->finished >= ev->at;
    pthread_mutex_unlock(&fake.lock);
    return done;
}

static int fake_event_sync(int32_t dev, void * e) {
    fake_event * ev = e;
    fake.n_syncs++;
    if (ev->s && !fake_event_query(dev, e)) fake_stream_finish(ev->s);
    return TIDE_DEVAPI_OK;
}

static int fake_stream_wait_event(int32_t dev, void * s, void * e) {
    pthread_mutex_lock(&fake.lock);
    fake.n_waits++;
    pthread_mutex_unlock(&fake.lock);
    return TIDE_DEVAPI_OK;
}

static int fake_host_callback(int32_t dev, void * s, void (*fn)(void *), void * arg) {
    fake_stream * st = s;
    pthread_mutex_lock(&fake.lock);
    if (st->n_cb == 64) {
        pthread_mutex_unlock(&fake.lock);
        snprintf(fake.error, sizeof fake.error, "fake: too many callbacks on one stream");
        return TIDE_DEVAPI_ERROR;
    }
    fake.n_callbacks++;
    st->cb[st->n_cb].at  = st->queued;
    st->cb[st->n_cb].fn  = fn;
    st->cb[st->n_cb].arg = arg;
    st->n_cb++;
    int run = fake.autorun;
    pthread_mutex_unlock(&fake.lock);
    if (run) fake_stream_finish(st);
    return TIDE_DEVAPI_OK;
}

/* Copies at once, but counts as work the stream has still to finish. A
 * direction that misnames where dst or src is fails, as on a GPU. */
static int fake_copy_async(int32_t dev, void * dst, const void * src, size_t n, int32_t kind, void * s) {
    bool dst_dev = kind != TIDE_COPY_D2H, src_dev = kind != TIDE_COPY_H2D;
    if (n && (fake_on_device(dst) != dst_dev || fake_on_device(src) != src_dev)) {
        snprintf(fake.error, sizeof fake.error, "fake: a %s copy of %zu bytes from %s memory to %s memory",
                 kind == TIDE_COPY_H2D ? "host-to-device" : kind == TIDE_COPY_D2H ? "device-to-host" : "device-to-device",
                 n, fake_on_device(src) ? "device" : "host", fake_on_device(dst) ? "device" : "host");
        return TIDE_DEVAPI_ERROR;
    }
    if (((fake_stream *)s)->capturing)
        return fake_record(s, (fake_node){.copy = 1, .kind = kind, .dst = dst, .src = src, .n = n});
    memcpy(dst, src, n);
    pthread_mutex_lock(&fake.lock);
    ((fake_stream *)s)->queued++;
    pthread_mutex_unlock(&fake.lock);
    return TIDE_DEVAPI_OK;
}

/* Queues a unit of work (a kernel) on s. */
static inline void fake_launch(fake_stream * s) {
    pthread_mutex_lock(&fake.lock);
    s->queued++;
    pthread_mutex_unlock(&fake.lock);
}

static int fake_pinned_alloc(size_t n, void ** out) {
    *out = malloc(n ? n : 1);
    fake.n_pinned++;
    return TIDE_DEVAPI_OK;
}

static int fake_pinned_free(void * p) {
    free(p);
    return TIDE_DEVAPI_OK;
}

/* A host view of a kernel's tensor: the device memory is host memory here.
 * A host number gets a 0-d tensor over `num`. */
static tide_tensor * fake_host_view(const tide_devtensor * t, double * num) {
    static double none;   /* what an empty tensor (data NULL) is a view of */
    if (!t->data && t->nelem == 0) return tide_tensor_from_blob(&none, t->ndim, t->sizes, t->strides, t->dtype, NULL, NULL);
    if (!t->data) {
        if (t->dtype == TIDE_DTYPE_I64) memcpy(num, &t->ivalue, sizeof t->ivalue);
        else tide_store_double(num, t->dtype, t->value);
        return tide_tensor_from_blob(num, 0, NULL, NULL, t->dtype, NULL, NULL);
    }
    return tide_tensor_from_blob(t->data, t->ndim, t->sizes, t->strides, t->dtype, NULL, NULL);
}

/* The CPU kernel of call d on its tensors' memory. A bad index goes to the
 * call's report, as a device kernel's does: `rep` when the call was recorded
 * into a graph (written at every run), else one it asks for then. */
static int fake_run_call(const tide_devcall * d, tide_devreport * rep) {
    tide_opcall c;
    double      nums[TIDE_OP_MAX_IN];
    memset(&c, 0, sizeof c);
    c.op            = tide_op_find(d->op);
    c.n_in          = d->n_in;
    c.n_out         = d->n_out;
    c.compute_dtype = d->compute_dtype;
    c.rng_seed      = d->rng_at ? ((const uint64_t *)d->rng_at)[0] : d->rng_seed;
    c.rng_offset    = d->rng_at ? ((const uint64_t *)d->rng_at)[1] : d->rng_offset;
    c.p             = d->p;
    if (rep) memset(rep, 0, sizeof *rep);
    int ok = 1;
    for (int32_t i = 0; i < d->n_in; i++) ok &= (c.in[i] = fake_host_view(&d->in[i], &nums[i])) != NULL;
    for (int32_t i = 0; i < d->n_out; i++) ok &= (c.out[i] = fake_host_view(&d->out[i], NULL)) != NULL;
    tide_status st = ok ? tide_op_def_get(c.op)->cpu(&c) : tide_last_status();
    for (int32_t i = 0; i < d->n_in; i++) tide_tensor_release(c.in[i]);
    for (int32_t i = 0; i < d->n_out; i++) tide_tensor_release(c.out[i]);
    tide_devreport got = {0};
    if (st == TIDE_E_INDEX &&
        sscanf(strstr(tide_last_error(), "index ") ? strstr(tide_last_error(), "index ") : "",
               "index %" SCNd64 " is out of range for dimension %d of size %" SCNd64, &got.value, &got.dim,
               &got.bound) == 3) {
        /* the launch itself succeeds */
        tide_devreport * r = rep ? rep : d->report(d->scratch_ctx);
        if (!r) return TIDE_DEVAPI_OOM;
        got.code = TIDE_DEVREPORT_INDEX;
        got.dim--;
        if (rep) memcpy(rep, &got, sizeof got);
        else {   /* what the device's work writes into the report, in stream order */
            memcpy(r, &got, sizeof got);
            fake_launch(d->stream);
        }
        st = TIDE_OK;
    }
    if (st != TIDE_OK) snprintf(fake.error, sizeof fake.error, "%s", tide_last_error());
    pthread_mutex_lock(&fake.lock);
    ((fake_stream *)d->stream)->queued++;
    fake.n_kernels++;
    pthread_mutex_unlock(&fake.lock);
    return st == TIDE_OK ? TIDE_DEVAPI_OK : TIDE_DEVAPI_ERROR;
}

/* Every op's kernel: the CPU kernel, run at launch on the tensors' memory,
 * after taking and writing a block of scratch (so ASan sees it is real).
 * Recorded into a graph, it takes its scratch and a report now, as a device
 * kernel's host code would, and runs at each launch. */
static int fake_kernel_run(const tide_devcall * d) {
    void * scratch = d->scratch(d->scratch_ctx, 256);
    if (!scratch) return TIDE_DEVAPI_OOM;
    memset(scratch, 0xab, 256);
    pthread_mutex_lock(&fake.lock);
    fake.last_scratch = scratch;
    pthread_mutex_unlock(&fake.lock);
    fake_stream * s = d->stream;
    if (!s->capturing) return fake_run_call(d, NULL);
    tide_devreport * rep = d->report(d->scratch_ctx);
    if (!rep) return TIDE_DEVAPI_OOM;
    return fake_record(s, (fake_node){.call = *d, .rep = rep});
}

static int fake_capture_begin(int32_t dev, void * s) {
    fake_stream * st = s;
    if (st->capturing) {
        snprintf(fake.error, sizeof fake.error, "fake: the stream is recording already");
        return TIDE_DEVAPI_ERROR;
    }
    st->capturing = calloc(1, sizeof *st->capturing);
    return st->capturing ? TIDE_DEVAPI_OK : TIDE_DEVAPI_OOM;
}

static int fake_graph_destroy(int32_t dev, void * graph) {
    fake_graph * g = graph;
    for (int i = 0; i < g->n; i++) free(g->nodes[i].rtc_arg);
    free(g->nodes);
    free(g);
    return TIDE_DEVAPI_OK;
}

static int fake_capture_end(int32_t dev, void * s, void ** graph) {
    fake_stream * st = s;
    fake_graph *  g  = st->capturing;
    st->capturing    = NULL;
    *graph           = NULL;
    if (!g || fake.no_capture) {
        if (g) fake_graph_destroy(dev, g);
        snprintf(fake.error, sizeof fake.error, "fake: the graph could not be recorded");
        return TIDE_DEVAPI_ERROR;
    }
    pthread_mutex_lock(&fake.lock);
    fake.n_captures++;
    pthread_mutex_unlock(&fake.lock);
    *graph = g;
    return TIDE_DEVAPI_OK;
}

static int fake_graph_launch(int32_t dev, void * graph, void * s) {
    fake_graph * g = graph;
    pthread_mutex_lock(&fake.lock);
    fake.n_graph_launches++;
    pthread_mutex_unlock(&fake.lock);
    for (int i = 0; i < g->n; i++) {
        fake_node * nd = &g->nodes[i];
        if (nd->copy) {
            fake_copy_async(dev, nd->dst, nd->src, nd->n, nd->kind, s);
            continue;
        }
        if (nd->rtc_fn) {
            pthread_mutex_lock(&fake.lock);
            fake.n_rtc_launches++;
            pthread_mutex_unlock(&fake.lock);
            ((void (*)(const void *))nd->rtc_fn)(nd->rtc_arg);
            fake_launch(s);
            continue;
        }
        tide_devcall c = nd->call;
        c.stream       = s;
        if (fake_run_call(&c, nd->rep) != TIDE_DEVAPI_OK) return TIDE_DEVAPI_ERROR;
    }
    return TIDE_DEVAPI_OK;
}

static tide_devkernel_fn fake_kernel(const char * op) {
    if (fake.no_kernels || tide_op_find(op) < 0) {
        snprintf(fake.error, sizeof fake.error, "%s: the fake device was told to have no kernels", op);
        return NULL;
    }
    return fake_kernel_run;
}

static int32_t fake_probe(char * reason, size_t n) {
    int32_t count = fake.n_devices > 0 ? fake.n_devices : 1;
    snprintf(reason, n, "%d device%s: cuda:0 fake (host memory)", count, count > 1 ? "s" : "");
    return count;
}

/* Between the fake devices: host memory too, queued on the destination's stream. */
static int fake_copy_peer(int32_t dst_dev, void * dst, int32_t src_dev, const void * src, size_t n, void * s) {
    pthread_mutex_lock(&fake.lock);
    fake.n_peer++;
    pthread_mutex_unlock(&fake.lock);
    return fake_copy_async(dst_dev, dst, src, n, TIDE_COPY_D2D, s);
}

static const char * fake_error_text(void) { return fake.error; }

/* An sm_90 part (the architecture the NVRTC check compiles for) with one
 * multiprocessor and the fake's capacity. */
static int fake_device_props(int32_t dev, tide_cuda_props * out) {
    snprintf(out->name, sizeof out->name, "fake cuda:%d (host memory)", dev);
    out->major            = 9;
    out->minor            = 0;
    out->multi_processors = 1;
    pthread_mutex_lock(&fake.lock);
    out->total_bytes = (int64_t)fake.capacity;
    pthread_mutex_unlock(&fake.lock);
    return TIDE_DEVAPI_OK;
}

/* The ops whose CPU loops the run-time compiled kernels call (fake_cpu_loops). */
#define FAKE_N_OPS 14
#define FAKE_STR_(x) #x
#define FAKE_STR(x) FAKE_STR_(x)

/* What makes a kernel's CUDA source host C++: the CUDA names it uses, and
 * TIDE_KERNEL (which the source defines only when it is not set) made a host
 * function taking a pointer to the parameter, which one "thread" runs whole. */
static const char fake_rtc_prelude[] =
    "#include <math.h>\n#include <string.h>\n#define FAKE_N_OPS " FAKE_STR(FAKE_N_OPS) "\n"
    "#define __device__\n#define __host__\n#define __global__\n"
    "struct fake_dim { unsigned x; };\n"
    "static const fake_dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};\n"
    "static inline float __fadd_rn(float a, float b) { return a + b; }\n"
    "static inline float __fsub_rn(float a, float b) { return a - b; }\n"
    "static inline float __fmul_rn(float a, float b) { return a * b; }\n"
    "static inline float __fdiv_rn(float a, float b) { return a / b; }\n"
    "static inline double __dadd_rn(double a, double b) { return a + b; }\n"
    "static inline double __dsub_rn(double a, double b) { return a - b; }\n"
    "static inline double __dmul_rn(double a, double b) { return a * b; }\n"
    "static inline double __ddiv_rn(double a, double b) { return a / b; }\n"
    "static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }\n"
    "static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }\n"
    "static inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }\n"
    "static inline unsigned __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }\n"
    /* the transcendental ops as the CPU computes them (the fake's other kernels
     * are the CPU's): non-template overloads of the f_<op> names, which C++
     * prefers to ewmath.cuh's templates; tide_fake_bind hands over the loops */
    "typedef void (*fake_loop)(long long, long long, void *, const void * const *, const void *);\n"
    "static fake_loop fake_loops[FAKE_N_OPS][2];\n"
    "static const void * fake_calls[FAKE_N_OPS];\n"
    "extern \"C\" void tide_fake_bind(const fake_loop * loops, const void * const * calls) {\n"
    "    memcpy(fake_loops, loops, sizeof fake_loops);\n"
    "    memcpy(fake_calls, calls, sizeof fake_calls);\n"
    "}\n"
    "template <typename T> static inline T fake_run(int k, T x) {\n"
    "    T r;\n"
    "    const void * in[1] = {&x};\n"
    "    fake_loops[k][sizeof(T) == 8](1, 0, &r, in, fake_calls[k]);\n"
    "    return r;\n"
    "}\n"
    "#define FAKE_OP(name, k) \\\n"
    "    static inline float tide_fake_##name(float x) { return fake_run(k, x); } \\\n"
    "    static inline double tide_fake_##name(double x) { return fake_run(k, x); }\n"
    "FAKE_OP(exp, 0) FAKE_OP(log, 1) FAKE_OP(log1p, 2) FAKE_OP(expm1, 3) FAKE_OP(tanh, 4) FAKE_OP(sigmoid, 5)\n"
    "FAKE_OP(silu, 6) FAKE_OP(sin, 7) FAKE_OP(cos, 8)\n"
    "static inline float tide_fake_gelu(float x, bool t) { return fake_run(t ? 10 : 9, x); }\n"
    "static inline double tide_fake_gelu(double x, bool t) { return fake_run(t ? 10 : 9, x); }\n"
    "template <typename T> static inline T fake_run2(int k, T a, T b) {\n"
    "    T r;\n"
    "    const void * in[2] = {&a, &b};\n"
    "    fake_loops[k][sizeof(T) == 8](1, 0, &r, in, fake_calls[k]);\n"
    "    return r;\n"
    "}\n"
    "static inline float tide_fake_gelu_backward(float g, float x, bool t) { return fake_run2(t ? 12 : 11, g, x); }\n"
    "static inline double tide_fake_gelu_backward(double g, double x, bool t) { return fake_run2(t ? 12 : 11, g, x); }\n"
    /* the CUDA math library's erfinv, which C's has not */
    "static inline float erfinvf(float x) { return fake_run(13, x); }\n"
    "static inline double erfinv(double x) { return fake_run(13, x); }\n"
    "#define f_exp tide_fake_exp\n#define f_log tide_fake_log\n#define f_log1p tide_fake_log1p\n"
    "#define f_expm1 tide_fake_expm1\n#define f_tanh tide_fake_tanh\n#define f_sigmoid tide_fake_sigmoid\n"
    "#define f_silu tide_fake_silu\n#define f_sin tide_fake_sin\n#define f_cos tide_fake_cos\n"
    "#define f_gelu tide_fake_gelu\n#define f_gelu_backward tide_fake_gelu_backward\n"
    "#define TIDE_KERNEL(name) static void name##_body(const fused_args & a); \\\n"
    "    extern \"C\" void name(const void * p) { name##_body(*(const fused_args *)p); } \\\n"
    "    static void name##_body(const fused_args & a)\n";

/* The CPU's loops of the ops the prelude maps (in its order, float32 and
 * float64), and the calls they read their params from (gelu's form). */
extern const tide_ew_loop tide_loops_exp[TIDE_DTYPE_COUNT], tide_loops_log[TIDE_DTYPE_COUNT],
    tide_loops_log1p[TIDE_DTYPE_COUNT], tide_loops_expm1[TIDE_DTYPE_COUNT], tide_loops_tanh[TIDE_DTYPE_COUNT],
    tide_loops_sigmoid[TIDE_DTYPE_COUNT], tide_loops_silu[TIDE_DTYPE_COUNT], tide_loops_sin[TIDE_DTYPE_COUNT],
    tide_loops_cos[TIDE_DTYPE_COUNT], tide_loops_gelu[TIDE_DTYPE_COUNT], tide_loops_gelu_backward[TIDE_DTYPE_COUNT],
    tide_loops_erfinv[TIDE_DTYPE_COUNT];
static tide_opcall fake_gelu_calls[2] = {{.p = {.flags = 0}}, {.p = {.flags = 1}}};
static const void * const fake_cpu_calls[FAKE_N_OPS] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                &fake_gelu_calls[0], &fake_gelu_calls[1],
                                                &fake_gelu_calls[0], &fake_gelu_calls[1], NULL};
static const tide_ew_loop (*fake_cpu_loops(void))[2] {
    static tide_ew_loop l[FAKE_N_OPS][2];
    const tide_ew_loop * const ops[FAKE_N_OPS] = {tide_loops_exp,     tide_loops_log,  tide_loops_log1p, tide_loops_expm1,
                                          tide_loops_tanh,    tide_loops_sigmoid, tide_loops_silu, tide_loops_sin,
                                          tide_loops_cos,     tide_loops_gelu, tide_loops_gelu,
                                          tide_loops_gelu_backward, tide_loops_gelu_backward, tide_loops_erfinv};
    for (int k = 0; k < FAKE_N_OPS; k++) l[k][0] = ops[k][TIDE_DTYPE_F32], l[k][1] = ops[k][TIDE_DTYPE_F64];
    return (const tide_ew_loop (*)[2])l;
}

/* NVRTC, where the build found the CUDA toolkit (TIDE_TEST_NVRTC, its path):
 * every source is also compiled for a GPU as the backend compiles it, which
 * needs no GPU, so that CUDA a host compiler accepts but NVRTC would not is
 * caught here. Left out under the sanitizers, which would report the
 * compiler's own allocations. */
#if defined(TIDE_TEST_NVRTC) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FAKE_NVRTC 1
static int64_t fake_nvrtc_checks;   /* sources NVRTC compiled */

static int fake_nvrtc_check(const char * src) {
    typedef int (*create_fn)(void **, const char *, const char *, int, const char * const *, const char * const *);
    typedef int (*compile_fn)(void *, int, const char * const *);
    typedef int (*log_size_fn)(void *, size_t *);
    typedef int (*log_fn)(void *, char *);
    typedef int (*destroy_fn)(void **);
    static void * lib;
    if (!lib && !(lib = dlopen(TIDE_TEST_NVRTC, RTLD_NOW | RTLD_LOCAL))) {
        snprintf(fake.error, sizeof fake.error, "fake: NVRTC (%s) does not load: %s", TIDE_TEST_NVRTC, dlerror());
        return TIDE_DEVAPI_ERROR;
    }
    create_fn   create   = (create_fn)dlsym(lib, "nvrtcCreateProgram");
    compile_fn  compile  = (compile_fn)dlsym(lib, "nvrtcCompileProgram");
    log_size_fn log_size = (log_size_fn)dlsym(lib, "nvrtcGetProgramLogSize");
    log_fn      get_log  = (log_fn)dlsym(lib, "nvrtcGetProgramLog");
    destroy_fn  destroy  = (destroy_fn)dlsym(lib, "nvrtcDestroyProgram");
    void *      prog     = NULL;
    if (!create || !compile || !log_size || !get_log || !destroy || create(&prog, src, "fused.cu", 0, NULL, NULL)) {
        snprintf(fake.error, sizeof fake.error, "fake: NVRTC has no program");
        return TIDE_DEVAPI_ERROR;
    }
    const char * opts[] = {"--gpu-architecture=sm_90", "--fmad=false", "--std=c++17"};   /* the backend's */
    int          rc     = compile(prog, 3, opts);
    size_t       n      = 0;
    if (rc) {
        char text[768] = "";
        if (!log_size(prog, &n) && n < sizeof text) get_log(prog, text);
        snprintf(fake.error, sizeof fake.error, "fake: NVRTC refused the source: %s", text);
    }
    destroy(&prog);
    if (rc) return TIDE_DEVAPI_ERROR;
    fake_nvrtc_checks++;
    return TIDE_DEVAPI_OK;
}
#endif

/* The source, after the prelude, built into a shared library and loaded. */
static int fake_rtc_compile(int32_t dev, const char * src, const char * name, void ** fn) {
    if (fake.no_rtc) {
        snprintf(fake.error, sizeof fake.error, "fake: the runtime compiler was told to be missing");
        return TIDE_DEVAPI_ERROR;
    }
#ifdef FAKE_NVRTC
    if (fake_nvrtc_check(src) != TIDE_DEVAPI_OK) {
        printf("# fake rtc: %s\n", fake.error);
        return TIDE_DEVAPI_ERROR;
    }
#endif
    char dir[] = "/tmp/tide-fake-rtc-XXXXXX", path[64], lib[64], cmd[512], log[64];
    if (!mkdtemp(dir)) {
        snprintf(fake.error, sizeof fake.error, "fake: no temporary folder");
        return TIDE_DEVAPI_ERROR;
    }
    snprintf(path, sizeof path, "%s/k.cpp", dir);
    snprintf(lib, sizeof lib, "%s/k.so", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    FILE * f = fopen(path, "w");
    if (!f) {
        snprintf(fake.error, sizeof fake.error, "fake: cannot write %s", path);
        return TIDE_DEVAPI_ERROR;
    }
    fputs(fake_rtc_prelude, f);
    fputs(src, f);
    fclose(f);
    const char * cxx = getenv("CXX");
    snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -ffp-contract=off -fPIC -shared -o %s %s >%s 2>&1",
             cxx && *cxx ? cxx : "c++", lib, path, log);
    int    rc  = system(cmd);
    void * h   = rc == 0 ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    void * sym = h ? dlsym(h, name) : NULL;
    if (!sym) {
        char  text[768] = "";
        FILE * lf       = fopen(log, "r");
        if (lf) {
            size_t k = fread(text, 1, sizeof text - 1, lf);
            text[k]  = 0;
            fclose(lf);
        }
        snprintf(fake.error, sizeof fake.error, "fake: compiling %s failed (%s): %s", name,
                 rc ? "the compiler" : h ? "no such symbol" : dlerror(), text);
        printf("# fake rtc: %s\n", fake.error);
        remove(path), remove(lib), remove(log), remove(dir);
        return TIDE_DEVAPI_ERROR;
    }
    void (*bind)(const tide_ew_loop (*)[2], const void * const *) =
        (void (*)(const tide_ew_loop (*)[2], const void * const *))dlsym(h, "tide_fake_bind");
    if (bind) bind(fake_cpu_loops(), fake_cpu_calls);
    /* the library stays loaded, as the backend's modules do; its files go */
    remove(path), remove(lib), remove(log), remove(dir);
    pthread_mutex_lock(&fake.lock);
    fake.n_rtc_compiles++;
    pthread_mutex_unlock(&fake.lock);
    *fn = sym;
    return TIDE_DEVAPI_OK;
}

static int fake_rtc_launch(int32_t dev, void * fn, const void * arg, size_t nbytes, int64_t n, void * s) {
    fake_stream * st = s;
    if (st->capturing) {   /* counted when the graph runs it */
        void * copy = malloc(nbytes);
        if (!copy) return TIDE_DEVAPI_OOM;
        memcpy(copy, arg, nbytes);
        return fake_record(st, (fake_node){.rtc_fn = fn, .rtc_arg = copy});
    }
    pthread_mutex_lock(&fake.lock);
    fake.n_rtc_launches++;
    pthread_mutex_unlock(&fake.lock);
    ((void (*)(const void *))fn)(arg);
    fake_launch(st);
    return TIDE_DEVAPI_OK;
}

static const tide_devapi fake_api = {
    TIDE_DEVAPI_VERSION, "fake",           fake_probe,         fake_error_text,   fake_mem_alloc,
    fake_mem_free,       fake_mem_info,    fake_stream_create, fake_stream_destroy, fake_stream_sync,
    fake_event_create,   fake_event_destroy, fake_event_record, fake_event_query,  fake_event_sync,
    fake_stream_wait_event, fake_host_callback, fake_copy_async, fake_pinned_alloc, fake_pinned_free,
    fake_kernel,         fake_copy_peer,     fake_capture_begin, fake_capture_end,  fake_graph_launch,
    fake_graph_destroy,  fake_rtc_compile,   fake_rtc_launch,    fake_device_props,
};

#endif
