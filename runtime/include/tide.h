/*
 * tide.h - the one public header of libtide, Tide's C engine.
 *
 * Tide owns tensors (strided views over reference-counted storages) and runs
 * every op through an engine that may execute it later, on the op's device.
 * This header is also the source of the LuaJIT FFI declarations (bindings/
 * generates cdef.lua from it), so declarations use only the C subset that
 * ffi.cdef parses: no macros inside declarations; `#` lines are dropped.
 *
 * A short manual
 * --------------
 *     tide_tensor * a = tide_tensor_zeros(2, (int64_t[]){2, 3}, TIDE_DTYPE_F32);
 *     tide_tensor * b = tide_tensor_full(0, NULL, 2.0, TIDE_DTYPE_F32);  // 0-d
 *     tide_tensor * in[2] = {a, b}, * out[1];
 *     if (tide_op_call(tide_op_find("add"), in, 2, NULL, out, NULL) != TIDE_OK)
 *         fprintf(stderr, "%s\n", tide_last_error());
 *     tide_tensor_release(a); ...
 *
 * Conventions
 * - Functions that create an object return it owned (+1), or NULL on failure.
 *   Arguments are borrowed. Every other function returns a tide_status:
 *   TIDE_OK (0) or an error code; the message is in tide_last_error(), kept
 *   per thread. Nothing here aborts or prints on bad input.
 * - Dimensions and indices in this API are 0-based (the Lua module is 1-based).
 * - A tensor's view metadata (sizes, strides, offset, dtype) never changes
 *   after creation; only the contents of its storage do. Ops that read or write
 *   storage contents are asynchronous: they are queued on the engine and the
 *   data is ready after tide_tensor_wait() or tide_sync().
 * - Thread safety: all functions may be called from several threads at once
 *   (runtime/tests/test_threads.c runs ops from several host threads, also
 *   under ThreadSanitizer). Concurrent writes to the same storage are ordered by
 *   the order in which they reach the engine; a tensor may be shared between
 *   threads, and its reference count is atomic. Error messages are per thread.
 * - Embedding: link with `pkg-config --libs tide` (shared or --static); a host
 *   that owns a LuaJIT lua_State uses tide_lua.h and `pkg-config tide-lua`.
 */
#ifndef TIDE_H
#define TIDE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* -- status and errors ------------------------------------------------ */

typedef enum tide_status {
    TIDE_OK         = 0,
    TIDE_E_SHAPE    = 1,  /* shapes do not fit the op                      */
    TIDE_E_DTYPE    = 2,  /* a dtype the op does not accept                */
    TIDE_E_DEVICE   = 3,  /* unknown device, or tensors on different ones   */
    TIDE_E_INDEX    = 4,  /* an index or dimension out of range             */
    TIDE_E_VALUE    = 5,  /* an argument value outside the op's domain      */
    TIDE_E_OOM      = 6,  /* allocation failed                              */
    TIDE_E_IO       = 7,  /* a file could not be read or written            */
    TIDE_E_INTERNAL = 8,  /* a broken invariant of Tide itself: a bug        */
    TIDE_E_INTERRUPTED = 9 /* a wait or push stopped by tide_set_interrupt  */
} tide_status;

/* The message of the last failure on this thread ("" if none). Borrowed;
 * valid until the next failing call on the same thread. */
const char * tide_last_error(void);

/* Sets the calling thread's error message. Returns st, for `return tide_error_set(...)`.
 * The message is formatted like printf and truncated to 1023 bytes. */
tide_status tide_error_set(tide_status st, const char * fmt, ...);

/* -- dtypes ----------------------------------------------------------- */

typedef enum tide_dtype {
    TIDE_DTYPE_F32  = 0,  /* the default */
    TIDE_DTYPE_F64  = 1,
    TIDE_DTYPE_I32  = 2,
    TIDE_DTYPE_I64  = 3,
    TIDE_DTYPE_U8   = 4,
    TIDE_DTYPE_BOOL = 5,
    TIDE_DTYPE_F16  = 6,  /* storage type: ops compute in float32 */
    TIDE_DTYPE_BF16 = 7,  /* storage type: ops compute in float32 */
    TIDE_DTYPE_COUNT = 8
} tide_dtype;

const char * tide_dtype_name(int32_t dtype);      /* "float32", ...; NULL if invalid */
int32_t      tide_dtype_from_name(const char * name); /* -1 if unknown; accepts aliases ("float", "long", ...) */
size_t       tide_dtype_size(int32_t dtype);      /* bytes per element; 0 if invalid */
int32_t      tide_dtype_is_float(int32_t dtype);
/* PyTorch's type promotion of two tensor dtypes. */
int32_t      tide_dtype_promote(int32_t a, int32_t b);

/* -- devices ---------------------------------------------------------- */

typedef enum tide_device_type {
    TIDE_DEVICE_CPU  = 0,
    TIDE_DEVICE_CUDA = 1
} tide_device_type;

typedef struct tide_device {
    int32_t type;   /* tide_device_type */
    int32_t index;  /* -1: the default queue of that type ("cpu") */
} tide_device;

/* Parses "cpu", "cpu:1", "cuda:0". Fails with TIDE_E_DEVICE for unknown or
 * unavailable devices. "cpu" and each "cpu:N" are separate execution queues
 * of the engine over the same host memory. */
tide_status tide_device_parse(const char * name, tide_device * out);
/* Number of "cpu:N" devices (N = 0 .. count-1) besides "cpu". */
int32_t     tide_device_cpu_count(void);
/* Writes "cpu", "cpu:1", ... into buf (at most n bytes). Returns buf. */
char *      tide_device_format(tide_device dev, char * buf, size_t n);

/* -- storage and tensors ------------------------------------------------ */

enum { TIDE_MAX_DIMS = 8 };

typedef struct tide_storage tide_storage;   /* opaque, reference-counted */

enum {
    TIDE_TENSOR_WRAPPED_NUMBER = 1   /* made from a host number: weak in type promotion */
};

/* A strided view over a storage. The fields are public so that the FFI reads
 * them without a call; they are read-only for everyone but the runtime. */
typedef struct tide_tensor {
    int64_t        sizes[TIDE_MAX_DIMS];
    int64_t        strides[TIDE_MAX_DIMS];  /* in elements */
    int64_t        offset;                  /* in elements */
    int64_t        nelem;                   /* product of sizes */
    tide_storage * storage;
    int32_t        ndim;
    int32_t        dtype_id;                /* tide_dtype */
    int32_t        refcount;                /* atomic; use retain/release */
    uint32_t       flags;                   /* TIDE_TENSOR_* */
    tide_device    dev;                     /* where the storage lives */
    int64_t        tag;                     /* the binding's own: the Lua registry slot */
} tide_tensor;

void          tide_tensor_retain(tide_tensor * t);
void          tide_tensor_release(tide_tensor * t);  /* NULL is a no-op */
/* Releases n tensors (NULL entries are skipped): one call for a batch. */
void          tide_tensor_release_many(tide_tensor ** ts, int64_t n);

/* A new contiguous tensor with uninitialised contents. sizes may be NULL when
 * ndim is 0. Fails on negative sizes, ndim > TIDE_MAX_DIMS, overflow or OOM. */
tide_tensor * tide_tensor_empty(int32_t ndim, const int64_t * sizes, int32_t dtype, tide_device dev);
/* A new tensor filled with value (converted to dtype), on the default CPU device. */
tide_tensor * tide_tensor_full(int32_t ndim, const int64_t * sizes, double value, int32_t dtype);
tide_tensor * tide_tensor_zeros(int32_t ndim, const int64_t * sizes, int32_t dtype);
/* A 0-d tensor holding a host number, flagged TIDE_TENSOR_WRAPPED_NUMBER. */
tide_tensor * tide_tensor_scalar(double value, int32_t dtype);
/* A tensor over memory the caller owns, without copying. free_fn(data, ctx)
 * is called (possibly from an engine thread) when the last view is gone and
 * no pending op uses it; free_fn may be NULL. strides may be NULL (contiguous). */
tide_tensor * tide_tensor_from_blob(void * data, int32_t ndim, const int64_t * sizes,
                                    const int64_t * strides, int32_t dtype,
                                    void (*free_fn)(void * data, void * ctx), void * ctx);
/* A contiguous tensor with a copy of n elements of `data` given as doubles. */
tide_tensor * tide_tensor_from_doubles(const double * data, int32_t ndim, const int64_t * sizes, int32_t dtype);

int32_t  tide_tensor_is_contiguous(const tide_tensor * t);
size_t   tide_tensor_nbytes(const tide_tensor * t);       /* bytes of the view's elements */
size_t   tide_storage_nbytes(const tide_storage * s);
int32_t  tide_storage_refcount(const tide_storage * s);
/* Waits for pending writes, then returns a pointer to the first element.
 * Borrowed: valid while t lives. NULL (with an error set) if a pending op on
 * the storage failed. */
void *   tide_tensor_data(tide_tensor * t);
/* Waits for every pending write to t's storage; returns its error, if any. */
tide_status tide_tensor_wait(tide_tensor * t);
/* Element i (row-major index over the view) as a double, after waiting. */
tide_status tide_tensor_get(tide_tensor * t, int64_t i, double * out);
/* Copies the view's elements, in row-major order, as doubles into out[0..nelem). */
tide_status tide_tensor_to_doubles(tide_tensor * t, double * out);

/* -- views: no allocation of data, the result shares t's storage -------- */

tide_tensor * tide_tensor_view(tide_tensor * t, int32_t ndim, const int64_t * sizes);    /* one size may be -1 */
tide_tensor * tide_tensor_reshape(tide_tensor * t, int32_t ndim, const int64_t * sizes); /* copies only if no view fits */
tide_tensor * tide_tensor_permute(tide_tensor * t, int32_t ndim, const int64_t * dims);
tide_tensor * tide_tensor_transpose(tide_tensor * t, int32_t d0, int32_t d1);
tide_tensor * tide_tensor_expand(tide_tensor * t, int32_t ndim, const int64_t * sizes); /* -1 keeps a size */
tide_tensor * tide_tensor_narrow(tide_tensor * t, int32_t dim, int64_t start, int64_t length);
tide_tensor * tide_tensor_select(tide_tensor * t, int32_t dim, int64_t index);
tide_tensor * tide_tensor_squeeze(tide_tensor * t, int32_t dim);    /* dim -1: every size-1 dim */
tide_tensor * tide_tensor_unsqueeze(tide_tensor * t, int32_t dim);
tide_tensor * tide_tensor_slice(tide_tensor * t, int32_t dim, int64_t start, int64_t stop, int64_t step);
tide_tensor * tide_tensor_as_strided(tide_tensor * t, int32_t ndim, const int64_t * sizes,
                                     const int64_t * strides, int64_t offset);
/* t itself (retained) if contiguous, else a contiguous copy. */
tide_tensor * tide_tensor_contiguous(tide_tensor * t);
/* A copy in another dtype and/or device (t itself, retained, when nothing changes and copy is 0). */
tide_tensor * tide_tensor_to(tide_tensor * t, int32_t dtype, tide_device dev, int32_t copy);

/* -- ops ---------------------------------------------------------------- */

enum { TIDE_OP_MAX_IN = 8, TIDE_OP_MAX_OUT = 4, TIDE_OP_MAX_INTS = 16 };

/* Non-tensor arguments of an op. Which fields an op reads is part of its
 * registry entry (see tide_op_info's `params` description). */
enum {
    TIDE_PARAMF_ONE_BASED = 1,   /* index tensors read and written by the op are 1-based (Lua) */
    TIDE_PARAMF_HAS_MIN   = 2,   /* clamp: scalars[0] is a lower bound */
    TIDE_PARAMF_HAS_MAX   = 4    /* clamp: scalars[1] is an upper bound */
};

typedef struct tide_op_params {
    int64_t ints[TIDE_OP_MAX_INTS];  /* dims (0-based), sizes, counts */
    double  scalars[4];
    int32_t n_ints;
    int32_t keepdim;
    int32_t dtype;                   /* requested result dtype, -1 for the op's rule */
    int32_t flags;
} tide_op_params;

enum {
    TIDE_OPF_ELEMWISE = 1,    /* output element i depends on input elements i */
    TIDE_OPF_COMMUTE  = 2,    /* binary op with op(a,b) == op(b,a) */
    TIDE_OPF_INPLACE  = 4,    /* may write into its first input */
    TIDE_OPF_REDUCE   = 8,    /* reduces over params.ints dims */
    TIDE_OPF_RANDOM   = 16,   /* draws from the generator */
    TIDE_OPF_NOINPUT  = 32,   /* creation op: shape from params */
    TIDE_OPF_VARIADIC = 64,   /* takes 1..TIDE_OP_MAX_IN inputs (cat, stack) */
    TIDE_OPF_XDEVICE  = 128   /* may write into a tensor on another device; runs on the destination's */
};

typedef struct tide_op_info {
    const char * name;
    const char * params;   /* a short description of which params it reads */
    int32_t      n_in;     /* inputs; -1 for variadic */
    int32_t      n_out;
    uint32_t     flags;    /* TIDE_OPF_* */
    int32_t      has_cpu;  /* a CPU kernel is linked in */
} tide_op_info;

int32_t     tide_op_count(void);
int32_t     tide_op_find(const char * name);             /* -1 if unknown */
tide_status tide_op_get_info(int32_t op, tide_op_info * out);
/* Runs op on inputs. On success outputs[0..n_out) are new tensors (+1).
 * If out is given, the (single) result is written into it instead: its shape
 * must match and its dtype receive the result (a float into an integer tensor
 * is an error); outputs[0] is then out, retained. params may be NULL.
 * Asynchronous: errors found by kernels surface at the next wait. */
tide_status tide_op_call(int32_t op, tide_tensor * const * inputs, int32_t n_in,
                         const tide_op_params * params, tide_tensor ** outputs, tide_tensor * out);

/* -- engine, threads, generator ---------------------------------------- */

/* Waits for every pending op; returns the first error of an op that ran
 * asynchronously and that no earlier tide_sync() returned. */
tide_status tide_sync(void);
/* 1: every op runs at once, in order, on the calling thread, and its error is
 * returned by the call that enqueued it (for debugging, like
 * CUDA_LAUNCH_BLOCKING); 0: asynchronous (the default). Turning it on waits for
 * queued work first. TIDE_SYNC=1 in the environment turns it on at start. */
void        tide_set_sync(int32_t on);
int32_t     tide_get_sync(void);
/* 1: asks the host threads' blocking waits (tide_tensor_wait, tide_tensor_data,
 * tide_tensor_get, tide_tensor_to_doubles, tide_sync) to stop: the first wait
 * or op call that sees the request takes it and returns TIDE_E_INTERRUPTED
 * ("interrupted"; a wait notices within about 50 ms). Queued ops go on running
 * and the engine stays usable; only the caller stops waiting. 0: withdraws a
 * request no call has taken yet (a host clears it before starting new work).
 * Async-signal-safe: meant for a SIGINT handler, as the tide REPL uses it. */
void        tide_set_interrupt(int32_t on);
/* The id of the last op this thread pushed that the engine queued rather than
 * ran at once, or 0; clears it. With tide_engine_set_origin the binding records
 * where (a "file:line") such an op was enqueued, for the messages of failures. */
int32_t     tide_engine_last_deferred(void);
void        tide_engine_set_origin(int32_t op_id, const char * where);
/* Chrome/Perfetto trace of the ops each device runs: start recording, and
 * stop and write the JSON to path (returns TIDE_E_IO if it cannot). */
void        tide_trace_start(void);
tide_status tide_trace_stop(const char * path);
/* Threads used by kernels (the runtime's pool; OpenBLAS runs inside it). */
void        tide_set_num_threads(int32_t n);
int32_t     tide_get_num_threads(void);
void        tide_manual_seed(uint64_t seed);
uint64_t    tide_initial_seed(void);

/* -- memory and configuration ------------------------------------------ */

typedef struct tide_mem_stats {
    int64_t bytes_in_use;    /* held by live storages */
    int64_t bytes_cached;    /* freed, kept for reuse */
    int64_t peak_in_use;
    int64_t n_allocs;        /* requests served */
    int64_t n_reused;        /* requests served from the cache */
} tide_mem_stats;

void        tide_mem_get_stats(tide_mem_stats * out);
void        tide_mem_empty_cache(void);

/* A text of "key=value" lines: version, BLAS library and kernel set, SIMD
 * level, threads. Borrowed, static. */
const char * tide_config(void);
const char * tide_version(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TIDE_H */
