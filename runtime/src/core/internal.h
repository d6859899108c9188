/*
 * internal.h - what the runtime's files share and the public header hides:
 * the storage layout, the host allocator, the op-call record that kernels
 * receive, the engine's push interface and the thread pool.
 * Nothing here is exported from libtide (TIDE_INTERNAL is hidden visibility).
 */
#ifndef TIDE_INTERNAL_H
#define TIDE_INTERNAL_H

#include "tide.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define TIDE_INTERNAL __attribute__((visibility("hidden")))
#define TIDE_LIKELY(x)   __builtin_expect(!!(x), 1)
#define TIDE_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Guards Tide's own invariants, never user input. */
#define TIDE_ASSERT(cond)                                                         \
    do {                                                                          \
        if (TIDE_UNLIKELY(!(cond)))                                               \
            return tide_error_set(TIDE_E_INTERNAL, "internal error: %s (%s:%d)",  \
                                  #cond, __FILE__, __LINE__);                     \
    } while (0)

#define TIDE_CHECK(expr)                                                          \
    do {                                                                          \
        tide_status st_ = (expr);                                                 \
        if (TIDE_UNLIKELY(st_ != TIDE_OK)) return st_;                            \
    } while (0)

/* The status of the calling thread's last tide_error_set: for callers of
 * functions that return NULL on failure. */
TIDE_INTERNAL tide_status tide_last_status(void);

/* -- allocator (core/alloc.c) ----------------------------------------------- */

enum { TIDE_ALIGN = 64 };
/* More registry ops than this: raise it (devcall.c keeps a word per op). */
enum { TIDE_OPS_MAX = 1024 };

/* 64-byte aligned host memory from the caching allocator; NULL when out of memory. */
TIDE_INTERNAL void * tide_host_alloc(size_t nbytes, size_t * capacity);
TIDE_INTERNAL void   tide_host_free(void * p, size_t capacity);
/* Zeroed small objects of a fixed size per kind, from a per-thread free list. */
enum { TIDE_OBJ_TENSOR = 0, TIDE_OBJ_STORAGE = 1, TIDE_OBJ_NODE = 2 };
TIDE_INTERNAL void * tide_obj_alloc(int kind, size_t size);
TIDE_INTERNAL void   tide_obj_free(int kind, void * p);

/* -- storage (core/storage.c) ----------------------------------------------- */

struct tide_storage {
    atomic_int   refcount;
    void *       data;
    size_t       nbytes;
    size_t       capacity;            /* what the allocator gave; 0 for external memory */
    tide_device  device;
    void (*free_fn)(void * data, void * ctx);
    void *       free_ctx;
    /* The engine's per-storage state: the queue of pending ops that use it, in
     * the order they were pushed (under the engine's lock), and poison. */
    struct tide_dep * q_head, * q_tail;
    struct tide_dep * q_grant;        /* the first op of the queue not granted yet, or NULL */
    int32_t      q_len, q_writes;     /* ops in the queue; those that write */
    int32_t      waiters;             /* threads waiting for that queue to empty */
    int32_t      n_launched;          /* of those ops, launched on a device and not done there yet */
    int32_t      launch_q;            /* 1 + the engine queue they were all launched on; 0: none; -1: several */
    atomic_int   poisoned;            /* 0 or the tide_status of a failed op that wrote here */
    char *       poison_msg;          /* owned; set before `poisoned` is published */
    int64_t      poison_root;         /* the id of the failure the poison comes from (engine.c), likewise */
    atomic_int   version;             /* bumped by every op that writes into an existing tensor */
    bool         deferred;            /* data is allocated when the first op writing it runs */
    struct tide_devblock * block;     /* a device storage's memory (engine/devalloc.c); data is its address */
};

TIDE_INTERNAL tide_storage * tide_storage_new(size_t nbytes, tide_device dev);
/* A storage for an op's result whose memory is allocated only when the op runs
 * (tide_storage_materialize, from the engine), the way MXNet's engine does: a
 * queue of pending ops then holds no memory for results not yet computed, and
 * a result reuses, still in cache, a block that an op which ran just before it
 * freed. Only the op that makes it may write it first; every reader waits for
 * that op (the engine's order), so nobody sees data == NULL. */
TIDE_INTERNAL tide_storage * tide_storage_new_deferred(size_t nbytes, tide_device dev);
/* Allocates a deferred storage's memory if it has none yet, on a CUDA device
 * for the stream (cuda_loader.h's TIDE_STREAM_*) of the op writing it first;
 * TIDE_E_OOM (with the message set) when the allocator cannot. */
TIDE_INTERNAL tide_status    tide_storage_materialize(tide_storage * s, int32_t stream_kind);
TIDE_INTERNAL void           tide_storage_retain(tide_storage * s);
TIDE_INTERNAL void           tide_storage_release(tide_storage * s);

/* -- tensors (core/tensor.c) ------------------------------------------------ */

/* A new tensor header (refcount 1) viewing s (retained). Sizes/strides set by caller,
 * then tide_tensor_finish() computes nelem. */
TIDE_INTERNAL tide_tensor * tide_tensor_alloc_header(tide_storage * s, int32_t dtype);
/* Whether two views touch a common byte of memory (not merely the same storage:
 * a planned replay keeps every intermediate in one arena). */
TIDE_INTERNAL bool tide_views_overlap(const tide_tensor * a, const tide_tensor * b);
/* Whether two views are the same elements of the same storage, in one dtype. */
TIDE_INTERNAL bool tide_same_view(const tide_tensor * a, const tide_tensor * b);
/* tide_tensor_empty over a deferred storage (see tide_storage_new_deferred):
 * for results that an op pushed right after will write. */
TIDE_INTERNAL tide_tensor * tide_tensor_empty_deferred(int32_t ndim, const int64_t * sizes, int32_t dtype,
                                                       tide_device dev);
TIDE_INTERNAL void          tide_tensor_finish(tide_tensor * t);
TIDE_INTERNAL void          tide_contiguous_strides(int32_t ndim, const int64_t * sizes, int64_t * strides);
TIDE_INTERNAL char *        tide_shape_str(const tide_tensor * t, char * buf, size_t n); /* "[2,3]" */
TIDE_INTERNAL char *        tide_dims_str(int32_t ndim, const int64_t * sizes, char * buf, size_t n);
/* Bytes per element of a valid dtype (tide_dtype_size without the check, for
 * hot paths): a nibble per dtype, in tide_dtype's order. */
static inline size_t tide_esize(int32_t d) { return (size_t)((0x22118484u >> (4 * d)) & 0xf); }
static inline void * tide_tensor_ptr(const tide_tensor * t) {
    return (char *)t->storage->data + t->offset * (int64_t)tide_esize(t->dtype_id);
}

/* -- dtype conversion (core/dtype.c) ---------------------------------------- */

/* Converts n elements between dtypes, both strided (strides in elements). */
/* Loops are compiled for several instruction sets and picked at load time: the
 * x86-64 levels, v4 (AVX-512) and v3 (AVX2 with FMA). A list of features such as
 * "avx2,fma" would not do: GCC makes one clone per feature, and the AVX2 one
 * then has no FMA (exp was 2.5 ns per element on a Zen 1 EPYC with it).
 * (not under the sanitizers: their runtimes are not up yet when ifunc resolvers run) */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(__clang__)
#define TIDE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TIDE_SIMD_CLONES
#endif

TIDE_INTERNAL void tide_convert(void * dst, int32_t dst_dtype, int64_t dst_stride,
                                const void * src, int32_t src_dtype, int64_t src_stride, int64_t n);
TIDE_INTERNAL double tide_load_double(const void * p, int32_t dtype);
TIDE_INTERNAL void   tide_store_double(void * p, int32_t dtype, double v);
/* tide_store_double's float-to-integer casts, for loops of one known dtype:
 * they saturate and send NaN to 0, so no input is undefined behaviour. The
 * clamp comes before the conversion, which is then always defined: no branch. */
static inline int32_t tide_sat_i32(double v) {
    double c = v > 2147483647.0 ? 2147483647.0 : v;
    c = c < -2147483648.0 ? -2147483648.0 : c;
    return v == v ? (int32_t)c : 0;
}
static inline int64_t tide_sat_i64(double v) {
    if (!(v == v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
TIDE_INTERNAL float    tide_f16_to_f32(uint16_t h);   /* core/half.c */
TIDE_INTERNAL uint16_t tide_f32_to_f16(float f);
TIDE_INTERNAL void     tide_f32_to_f16_dense(uint16_t * restrict d, const float * restrict s, int64_t n);
TIDE_INTERNAL void     tide_f16_to_f32_dense(float * restrict d, const uint16_t * restrict s, int64_t n);
TIDE_INTERNAL float    tide_bf16_to_f32(uint16_t h);
TIDE_INTERNAL uint16_t tide_f32_to_bf16(float f);
/* The dtype that kernels compute in for a storage dtype (f16/bf16 -> f32). */
static inline int32_t tide_dtype_compute(int32_t d) {
    return (d == TIDE_DTYPE_F16 || d == TIDE_DTYPE_BF16) ? TIDE_DTYPE_F32 : d;
}

/* -- op calls ---------------------------------------------------------------- */

/* What a kernel receives: the op, its inputs and outputs (all retained by the
 * call for as long as it is pending) and the non-tensor params. The kernel may
 * read only the storages of `in` and write only those of `out`. */
typedef struct tide_opcall {
    int32_t        op;
    int32_t        n_in, n_out;
    int32_t        compute_dtype;   /* the dtype the dtype rule chose to compute in */
    uint64_t       rng_seed;        /* OPF_RANDOM ops: their slice of the Philox stream, */
    uint64_t       rng_offset;      /* reserved at enqueue so results never depend on timing */
    uint32_t       dev_flags;       /* ops on a device: its settings at enqueue (TIDE_DEVCALL_* of device.h) */
    struct tide_devreport * dev_report;   /* ops on a device: what its work found wrong, read when done (devcall.c) */
    tide_tensor *  in[TIDE_OP_MAX_IN];
    tide_tensor *  out[TIDE_OP_MAX_OUT];
    tide_op_params p;
} tide_opcall;

typedef tide_status (*tide_kernel_fn)(const tide_opcall * c);

/* A shape rule fills the output sizes from the inputs and params; a dtype
 * rule the compute dtype and the output dtypes. Both validate and set errors. */
typedef struct tide_shape_out {
    int32_t ndim[TIDE_OP_MAX_OUT];
    int64_t sizes[TIDE_OP_MAX_OUT][TIDE_MAX_DIMS];
} tide_shape_out;
typedef tide_status (*tide_shape_rule)(tide_opcall * c, tide_shape_out * out);  /* may normalise dims in c->p */
typedef tide_status (*tide_dtype_rule)(tide_opcall * c, int32_t * out_dtypes);

/* What tide_op_call works out before it allocates results and pushes the
 * kernel: the call record (inputs, params, compute dtype; out[0] is the given
 * destination or NULL), the results' dtypes and shapes, the device, the
 * kernel, the op's flags, and whether writing into the destination must go
 * through a temporary (it overlaps an input). A captured graph's executor
 * (graph/exec.c) prepares each node once and then calls its kernel directly. */
typedef struct tide_op_prepared {
    tide_opcall    c;
    int32_t        dtypes[TIDE_OP_MAX_OUT];
    tide_shape_out shape;
    tide_device    dev;
    tide_kernel_fn kernel;
    uint32_t       flags;
    bool           temp;
} tide_op_prepared;

typedef struct tide_op_def {
    const char *    name;
    const char *    params;
    int32_t         n_in, n_out;
    uint32_t        flags;
    tide_dtype_rule dtype_rule;
    tide_shape_rule shape_rule;
    tide_kernel_fn  cpu;
} tide_op_def;

/* Op ids, generated from the registry (TIDE_OP_add, ...), for the runtime's own calls. */
enum {
#define X(name, nin, nout, dt, acc, sh, fl, par) TIDE_OP_##name,
#include "../ops/ops.def"
#undef X
    TIDE_OP_COUNT_
};

TIDE_INTERNAL const tide_op_def * tide_op_def_get(int32_t op);
/* Name of op for messages. */
TIDE_INTERNAL const char * tide_op_name(int32_t op);
/* The first half of tide_op_call: checks the call and fills r (see
 * tide_op_prepared); allocates, retains and pushes nothing. */
TIDE_INTERNAL tide_status tide_op_prepare(int32_t op, tide_tensor * const * inputs, int32_t n_in,
                                          const tide_op_params * params, tide_tensor * out, tide_op_prepared * r);

/* Sets this thread's default device to dev, unchecked (a device it had), and
 * returns the one it replaces: for replays, whose ops of no inputs make their
 * results where they did at capture. */
TIDE_INTERNAL tide_device tide_default_device_swap(tide_device dev);

/* Normalises a possibly negative 0-based dim against ndim (0-d tensors accept
 * 0 and -1). Sets an error naming op on failure. */
TIDE_INTERNAL tide_status tide_wrap_dim(const char * op, int64_t dim, int32_t ndim, int32_t * out);
/* Broadcast shape of n tensors, or an error naming op. */
TIDE_INTERNAL tide_status tide_broadcast_shape(const char * op, tide_tensor * const * ts, int32_t n,
                                               int32_t * ndim, int64_t * sizes);

/* -- autograd (autograd/autograd.c) ------------------------------------------- */

/* Thread-local grad mode; read on every op call. */
extern _Thread_local int32_t tide_grad_off;   /* 0: recording (the default) */

/* Autocast (ops/autocast.c). tide_autocast_on counts the device kinds this
 * thread has it on for: 0 keeps tide_op_call's fast path. */
extern _Thread_local int32_t tide_autocast_on;
typedef struct { int32_t dtype[2], on; } tide_autocast_state;
/* Turns autocast off for a backward walk, and back on after it. */
TIDE_INTERNAL tide_autocast_state tide_autocast_suspend(void);
TIDE_INTERNAL void                tide_autocast_resume(tide_autocast_state s);
/* The inputs of op cast as autocast wants them: out[i] +1, or NULL where in[i]
 * stays. Returns how many were cast, or -1 on failure (nothing kept). */
TIDE_INTERNAL int32_t tide_autocast_inputs(int32_t op, tide_tensor * const * in, int32_t n_in, tide_tensor ** out);

static inline bool tide_needs_grad(const tide_tensor * t) {
    return t->ag_node != NULL || (t->flags & TIDE_TENSOR_REQUIRES_GRAD);
}

/* Called by tide_op_call before an op runs when grad mode is on and an input
 * or `out` requires grad: refuses in-place writes autograd cannot follow. */
TIDE_INTERNAL tide_status tide_autograd_check_inplace(const tide_opcall * c, const tide_tensor * out);
/* Called by tide_op_call after an op was queued (c holds its normalised params
 * and its outputs; `out` is the tensor written in place, or NULL): records the
 * node when an input requires grad; for in-place ops it rebases out's history. */
TIDE_INTERNAL tide_status tide_autograd_record(const tide_opcall * c, tide_tensor * out);

/* View kinds recorded by core/tensor.c (negative ids next to the registry's ops). */
enum {
    TIDE_VIEW_RESHAPE = -1,   /* view, reshape, squeeze, unsqueeze: back by reshaping */
    TIDE_VIEW_PERMUTE = -2,   /* ints: the permutation */
    TIDE_VIEW_EXPAND  = -3,   /* back by summing to the input's shape */
    TIDE_VIEW_SLICE   = -4,   /* ints: dim, start, stop, step (select: step 0) */
    TIDE_VIEW_STRIDED = -5,   /* as_strided: not differentiable */
    TIDE_VIEW_ALIAS   = -6,   /* the same view (transpose of a 0-d tensor, ...) */
    TIDE_NODE_CUSTOM  = -7    /* a caller's function (tide_autograd_custom): ints[0] its id */
};
/* Records that v is a view of t made by `kind` with ints[0..n); no-op when t
 * does not require grad. Returns v, or NULL (releasing v) on failure. */
TIDE_INTERNAL tide_tensor * tide_autograd_view(tide_tensor * t, tide_tensor * v, int32_t kind,
                                               const int64_t * ints, int32_t n);
TIDE_INTERNAL void tide_node_release(tide_node * n);
/* Drops the hooks and retain_grad entries that name t weakly (t is being freed). */
TIDE_INTERNAL void tide_autograd_forget(tide_tensor * t);
/* The tensors that the autograd graph behind roots holds: what it saved for
 * its backward, and the leaves it accumulates into (borrowed, at most max in
 * out; one entry per reference held, so repeats are possible). Returns how
 * many there are. */
TIDE_INTERNAL int64_t tide_autograd_held(tide_tensor * const * roots, int32_t n_roots, tide_tensor ** out,
                                         int64_t max);

/* -- engine (engine/engine.c) ------------------------------------------------ */

typedef tide_status (*tide_engine_fn)(void * ctx);

/* A unit of work for the engine. ctx may live on the caller's stack: if the
 * engine runs the task later, it copies ctx_size bytes of it and calls
 * keep(copy) to retain what it refers to, then drop(copy) after running it. */
typedef struct tide_engine_task {
    tide_engine_fn fn;
    void *         ctx;
    size_t         ctx_size;
    void (*keep)(void * ctx);
    void (*drop)(void * ctx);
    const char *   name;          /* for errors and traces */
    int64_t        cost;          /* rough work in elements: small tasks may run inline */
    /* Writes a description of the task's arguments ("[2,3] [3]") for errors and traces. */
    void (*describe)(const void * ctx, char * buf, size_t n);
    /* Tasks on a CUDA device: fn only launches the work on the device's stream.
     * When the device has done it, complete(ctx) (if set) runs on the queue's
     * thread before anyone outside that stream sees the results (a copy to the
     * host finishes there). */
    tide_engine_fn complete;
    /* Tasks on a CUDA device: the stream fn launches on (cuda_loader.h's
     * TIDE_STREAM_*; 0, the compute stream, unless set). */
    int32_t        stream;
} tide_engine_task;

/* Queues the task to run on dev once the earlier ops writing any of `reads`,
 * and reading or writing any of `writes`, are done. A storage may appear in
 * both sets. If the task fails, or reads a poisoned storage, every storage of
 * `writes` is poisoned with the message. Returns an error only for failures
 * known at once (with the naive engine: every failure). */
TIDE_INTERNAL tide_status tide_engine_push(const tide_engine_task * task,
                                           tide_storage * const * reads, int32_t n_reads,
                                           tide_storage * const * writes, int32_t n_writes,
                                           tide_device dev);
/* Waits until no pending op uses s; returns its poison status (message set). */
TIDE_INTERNAL tide_status tide_engine_wait_storage(tide_storage * s);

/* Tracing the steps inside a task (a graph replay's): tide_trace_now() is 0 when
 * no trace is being recorded, else the start time to pass to tide_trace_step,
 * which records one event named `name` (static) with `where` as its argument. */
TIDE_INTERNAL double tide_trace_now(void);
TIDE_INTERNAL void   tide_trace_step(const char * name, const char * where, double t0);

/* Engine workers running a task now, for the pool's thread budget. */
TIDE_INTERNAL int32_t tide_engine_busy_workers(void);
/* Waits for every queued op, errors dropped: what atexit runs, so that no op
 * is still running when the libraries it uses are torn down. The engine
 * registers it at load; the CUDA backend registers it again once the CUDA
 * runtime is up (cuda_loader.c), so that it also runs before that is torn down. */
TIDE_INTERNAL void tide_engine_drain_at_exit(void);
/* "op: integer division by zero: element <at + 1> of the divisor is 0" (row-major), or
 * without the element for a 0-d divisor or a number (at < 0), and " (on cuda:N)" where cuda_dev >= 0:
 * the CPU kernels' error and a device's report (binary.c). */
TIDE_INTERNAL tide_status tide_zero_divisor_error(const char * op, int64_t at, int32_t cuda_dev);
/* CPU execution queues besides the default one (cpu:0 .. cpu:N-1). */
TIDE_INTERNAL int32_t tide_engine_cpu_queues(void);

/* -- thread pool (engine/pool.c) --------------------------------------------- */

/* Calls fn(ctx, begin, end) over [0, n) split into at most the pool's threads
 * ranges of at least `grain` items, each a multiple of `align` (except the last).
 * Runs inline when n < 2*grain or one thread is set. Returns when all are done. */
typedef void (*tide_range_fn)(void * ctx, int64_t begin, int64_t end);
/* Makes this thread's parallel_for calls run inline: the cpu:N devices are one
 * core's worth each, while "cpu" spreads a kernel over the whole pool. */
TIDE_INTERNAL void tide_pool_set_serial(int32_t on);
TIDE_INTERNAL void tide_parallel_for(int64_t n, int64_t grain, int64_t align, tide_range_fn fn, void * ctx);
/* Lends the pool's cores to a library that runs threads of its own (OpenBLAS):
 * returns the pool's thread count, with the pool held (no parallel_for runs and
 * its idle workers stop spinning) until tide_pool_unlend(); waits for a running
 * parallel_for first. Returns 0, holding nothing, on a thread whose kernels run
 * serially (a pool worker, a cpu:N queue) or when one thread is set. */
TIDE_INTERNAL int32_t tide_pool_lend(void);
TIDE_INTERNAL void    tide_pool_unlend(void);

/* -- BLAS (ops/cpu/blas.c) ---------------------------------------------------- */

TIDE_INTERNAL tide_status tide_blas_init(void);
TIDE_INTERNAL const char * tide_blas_describe(void);

/* -- matrix decompositions (ops/cpu/lapack.c) --------------------------------- */

/* The error of a factorisation that failed: op's message for LAPACK's info (> 0),
 * naming batch element `batch` (0-based) of nbatch (0: the input had no batch
 * dims), and device cuda:cuda_dev (-1: the CPU). Returns TIDE_E_VALUE. */
TIDE_INTERNAL tide_status tide_linalg_error(const char * op, int64_t info, int64_t batch, int64_t nbatch,
                                            int32_t cuda_dev);

/* -- random (ops/cpu/random.c) ----------------------------------------------- */

/* Reserves n counters of the global Philox stream; returns seed and offset. */
TIDE_INTERNAL void tide_rng_reserve(uint64_t n, uint64_t * seed, uint64_t * offset);

#endif /* TIDE_INTERNAL_H */
