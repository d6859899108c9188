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
/* The device where ops with no tensor input (full, arange, rand, ...) put
 * their results when no destination is given: "cpu" unless set. Per thread,
 * like PyTorch's torch.set_default_device. Fails, with the reason, for a
 * device that is not available. */
tide_status tide_set_default_device(tide_device dev);
tide_device tide_get_default_device(void);
/* CUDA devices usable here (0 when none; the backend is looked for on the first call). */
int32_t     tide_cuda_device_count(void);
/* Why there are no CUDA devices ("CUDA is not available: ..."), or the devices
 * found. Static. */
const char * tide_cuda_status(void);
/* What a CUDA device is, as torch.cuda.get_device_properties says. */
typedef struct tide_cuda_props {
    char    name[256];          /* "NVIDIA H100 80GB HBM3" */
    int32_t major, minor;       /* compute capability: 9, 0 for sm_90 */
    int32_t multi_processors;   /* streaming multiprocessors */
    int64_t total_bytes;        /* device memory */
} tide_cuda_props;
/* Fills *out for cuda:`device`. TIDE_E_DEVICE, with the reason, when there is
 * no such device (or no CUDA here). Thread-safe. */
tide_status tide_cuda_device_props(int32_t device, tide_cuda_props * out);
/* Writes "cpu", "cpu:1", ... into buf (at most n bytes). Returns buf. */
char *      tide_device_format(tide_device dev, char * buf, size_t n);

/* -- storage and tensors ------------------------------------------------ */

enum { TIDE_MAX_DIMS = 8 };

typedef struct tide_storage tide_storage;   /* opaque, reference-counted */
typedef struct tide_node    tide_node;      /* opaque: a step of the autograd graph */

enum {
    TIDE_TENSOR_WRAPPED_NUMBER = 1,  /* made from a host number: weak in type promotion */
    TIDE_TENSOR_REQUIRES_GRAD  = 2,  /* a leaf whose gradient is accumulated in ag_grad */
    TIDE_TENSOR_VIEW           = 4,  /* shares its storage with the tensor it was viewed from */
    TIDE_TENSOR_RETAINS_GRAD   = 8,  /* a non-leaf whose gradient backward keeps in ag_grad */
    TIDE_TENSOR_HOOKED         = 16  /* named by a hook or retain_grad: forgets them when released */
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
    /* Autograd: the node that made this tensor (retained; NULL for leaves and
     * tensors outside the graph), which of its outputs it is, and for leaves
     * that require grad the accumulated gradient (retained, or NULL). */
    tide_node *          ag_node;
    struct tide_tensor * ag_grad;
    int32_t              ag_output_nr;
    int32_t              capture_id;    /* the capture that made it (runtime only; 0: none) */
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
/* The same in dev's memory (copied there; on the CPU, tide_tensor_scalar):
 * weak in type promotion as a host number, read by the device's kernels. */
tide_tensor * tide_tensor_scalar_on(double value, int32_t dtype, tide_device dev);
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
/* Waits for pending writes, then returns a pointer to the first element (on a
 * CUDA device, its device address). Borrowed: valid while t lives. NULL (with
 * an error set) if a pending op on the storage failed. */
void *   tide_tensor_data(tide_tensor * t);
/* Waits for every pending write to t's storage; returns its error, if any. */
tide_status tide_tensor_wait(tide_tensor * t);
/* Element i (row-major index over the view) as a double, after waiting (a
 * device tensor is copied to the host first). */
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

/* -- autograd ------------------------------------------------------------ */
/*
 * Define-by-run reverse mode. While grad mode is on (the default, per thread),
 * every differentiable op whose inputs require grad records a node holding what
 * its backward rule needs (detached aliases of saved tensors, with the storage
 * versions they had); its outputs point at the node. Views record nodes too.
 * Backward walks the nodes in reverse and runs each rule as ordinary ops, so it
 * is queued on the engine and runs asynchronously like the forward pass.
 * Gradients of broadcast inputs are summed back to the input's shape, and
 * converted back to its dtype and device. One backward walk runs at a time in
 * a process (the walk only enqueues work; the work itself runs in parallel).
 */

/* Grad mode of the calling thread: 1 records nodes (the default), 0 does not. */
void        tide_autograd_set_enabled(int32_t on);
int32_t     tide_autograd_is_enabled(void);
/* 1 if t takes part in autograd: a leaf flagged REQUIRES_GRAD or the output of a recorded node. */
int32_t     tide_tensor_requires_grad(const tide_tensor * t);
/* Makes t a leaf that requires grad (on = 1) or stops it requiring grad (on = 0).
 * Fails for a non-leaf (it requires grad through its node: use detach) and for
 * tensors whose dtype is not a floating type. */
tide_status tide_tensor_set_requires_grad(tide_tensor * t, int32_t on);
/* The accumulated gradient of a leaf: +1, or NULL (no error set) when none. */
tide_tensor * tide_tensor_grad(tide_tensor * t);
/* Replaces t's gradient with g (retained; NULL clears it). g must have t's
 * shape, dtype and device. */
tide_status tide_tensor_set_grad(tide_tensor * t, tide_tensor * g);
/* A new tensor over the same storage and view that does not require grad. */
tide_tensor * tide_tensor_detach(tide_tensor * t);
/* The name of the op that made t ("mul", "view", ...) or NULL for leaves. Static. */
const char * tide_tensor_grad_fn_name(const tide_tensor * t);
/* Flags of a backward walk. */
enum {
    TIDE_AUTOGRAD_RETAIN_GRAPH = 1,  /* keep the saved tensors: the graph can be walked again */
    TIDE_AUTOGRAD_CREATE_GRAPH = 2,  /* record the rules' ops: the gradients have a history of their
                                      * own and can be differentiated again (Hessian-vector products,
                                      * gradient penalties); refused during a capture */
    TIDE_AUTOGRAD_ALLOW_UNUSED = 4   /* tide_autograd_grad: NULL for an input the roots do not use */
};
/* Computes the gradients of n root tensors with respect to the leaves that
 * require grad, accumulating them into the leaves' gradients. grads[i] is the
 * gradient of roots[i] (same shape), or NULL for a one-element root (taken as 1).
 * flags: TIDE_AUTOGRAD_*. Without RETAIN_GRAPH the nodes' saved tensors are
 * freed as the walk passes them, and a second backward through them fails.
 * With CREATE_GRAPH a leaf's gradient is replaced by the (recorded) sum rather
 * than added into in place. Asynchronous: the gradients are computed by engine
 * ops; errors of the walk itself are returned. A backward op without a rule of
 * its own (max_pool2d_backward) fails when a gradient it made with CREATE_GRAPH
 * is differentiated, naming the op. */
tide_status tide_autograd_backward(int32_t n, tide_tensor * const * roots, tide_tensor * const * grads,
                                   int32_t flags);
/* Like backward, but returns the gradients of the n_in tensors `inputs`
 * (leaves or not) in results[0..n_in) (+1 each) instead of accumulating into
 * leaves. An input that the roots do not depend on gets NULL with
 * TIDE_AUTOGRAD_ALLOW_UNUSED, else an error. */
tide_status tide_autograd_grad(int32_t n, tide_tensor * const * roots, tide_tensor * const * grads,
                               int32_t n_in, tide_tensor * const * inputs, tide_tensor ** results,
                               int32_t flags);
/* Makes backward keep the gradient of the non-leaf t in its ag_grad (accumulated
 * across backward calls, read with tide_tensor_grad), as a leaf's is; a no-op for
 * a leaf. Fails when t does not require grad, or during a capture. */
tide_status tide_tensor_retain_grad(tide_tensor * t);

/*
 * Gradient hooks. A hook watches the gradient that flows into a tensor (into the
 * output of t's node, or into a leaf, summed over all its uses before it is
 * accumulated). The runtime keeps only an id: whoever drives the walk runs the
 * hook, on its own thread, by walking step by step (tide_autograd_walk_*), so no
 * callback into a caller's language happens from C. tide_autograd_backward and
 * tide_autograd_grad fail when they meet a hook. Thread-safe.
 */
/* Adds a hook on t (which must require grad); *id gets its id (> 0). */
tide_status tide_tensor_add_hook(tide_tensor * t, int64_t * id);
/* Removes hook id of t; one already gone (its node freed) is a no-op. */
tide_status tide_tensor_remove_hook(tide_tensor * t, int64_t id);
/* Ids of hooks dropped with their node or leaf since the last call (at most max,
 * into out): the caller frees what it kept for them. Returns the count. */
int64_t     tide_autograd_hooks_dead(int64_t * out, int64_t max);

typedef struct tide_autograd_walk tide_autograd_walk;   /* opaque: a backward walk in progress */
/* Starts a walk as tide_autograd_backward (n_in = 0) or tide_autograd_grad
 * (inputs) would; *w gets it. One walk runs at a time in a process: until
 * tide_autograd_walk_end, other threads' walks wait, and this thread's fail. */
tide_status tide_autograd_walk_begin(tide_autograd_walk ** w, int32_t n, tide_tensor * const * roots,
                                     tide_tensor * const * grads, int32_t n_in, tide_tensor * const * inputs,
                                     int32_t flags);
/* Runs the walk until a hook is due or it ends: *hook gets the hook's id and
 * *grad the gradient it sees (borrowed, valid until the next call), or 0 and
 * NULL at the end. On failure, call tide_autograd_walk_end. */
tide_status tide_autograd_walk_next(tide_autograd_walk * w, int64_t * hook, tide_tensor ** grad);
/* Replaces the gradient the hook due sees (and what the walk goes on with) by g
 * (retained), which must have the same shape, dtype and device. */
tide_status tide_autograd_walk_replace(tide_autograd_walk * w, tide_tensor * g);
/* Ends and frees the walk (finished or not); for a grad walk, results gets the
 * gradients as tide_autograd_grad gives them (results may be NULL to drop them).
 * Returns the walk's first failure. */
tide_status tide_autograd_walk_end(tide_autograd_walk * w, tide_tensor ** results);

/*
 * Custom functions (tide.autograd.Function): differentiable functions whose
 * backward the caller computes. The caller runs the forward itself, with grad
 * mode off, then records one node for it with tide_autograd_custom, which gives
 * back the outputs as new tensors (aliases) whose history is that node. A walk
 * that reaches the node stops there as at a hook: tide_autograd_walk_next gives
 * the node's id in *hook and NULL in *grad. The caller reads the outputs'
 * gradients (tide_autograd_walk_custom_grads), computes the inputs' (it may run
 * ops, and a walk of a graph of its own, which nests in this one: gradient
 * checkpointing does), and gives them (tide_autograd_walk_custom_result) before
 * the next tide_autograd_walk_next. Ids come from the hooks' sequence, and a
 * node's id is reported by tide_autograd_hooks_dead once the node is freed.
 */
/* Records the node: inputs[0..n_in) (at most TIDE_OP_MAX_IN) are the tensor
 * inputs, outputs[0..n_out) (1 to TIDE_OP_MAX_OUT; NULL for one that is not
 * differentiable) what the forward made. results[i] gets a new tensor over
 * outputs[i]'s data whose history is the node (+1; NULL where outputs[i] is),
 * *id the node's id. name names it in errors and grad_fn. */
tide_status tide_autograd_custom(const char * name, int32_t n_in, tide_tensor * const * inputs, int32_t n_out,
                                 tide_tensor * const * outputs, tide_tensor ** results, int64_t * id);
/* The gradients of the outputs of the custom node the walk stopped at: grads[i]
 * +1, or NULL for an output that got none (zero). */
tide_status tide_autograd_walk_custom_grads(tide_autograd_walk * w, tide_tensor ** grads);
/* Gives the gradients of the node's n_in inputs (borrowed; NULL for zero): each
 * a floating-point tensor on its input's device, of its input's shape or one
 * that sums back to it (as a broadcast input's gradient does). */
tide_status tide_autograd_walk_custom_result(tide_autograd_walk * w, int32_t n_in, tide_tensor * const * grads);
/* t again as output nr of the custom node the walk stopped at (+1): a saved
 * output regains its history, for a backward recorded with CREATE_GRAPH. */
tide_tensor * tide_autograd_walk_custom_output(tide_autograd_walk * w, int32_t nr, tide_tensor * t);
/* The version of t's storage: it grows with every in-place write. */
int32_t     tide_tensor_version(const tide_tensor * t);

/*
 * Autocast (mixed precision), per thread and per kind of device, as
 * torch.autocast: while on for TIDE_DEVICE_CPU or TIDE_DEVICE_CUDA, op calls
 * that make a new result on such a device cast their float32/float16/bfloat16
 * inputs: matrix products and convolutions to `dtype`, ops that need range or
 * precision (exp, log, pow, softmax, sums, cumulative sums, linear algebra) to
 * float32. Casts are recorded copies (differentiable); backward walks run with
 * autocast off. Weights (leaves that require grad) are cast once per version
 * until autocast is off for every kind of device, or the cache is cleared.
 */
/* Sets the low-precision dtype (TIDE_DTYPE_F16 or TIDE_DTYPE_BF16), or -1 for
 * off; returns the previous setting, or -2 (error set) for a bad argument. */
int32_t     tide_autocast_set(int32_t device_type, int32_t dtype);
int32_t     tide_autocast_get(int32_t device_type);   /* the dtype, or -1 when off */
/* Releases the cached casts of weights. */
void        tide_autocast_clear_cache(void);

/* 1 if op (a registry id) has a backward rule. */
int32_t     tide_op_is_differentiable(int32_t op);

/* -- captured graphs (jit) ---------------------------------------------------- */
/*
 * A thread can record what its ops do into a graph and replay the recording
 * later on new arguments, without the code that issued the ops (the Lua
 * module's tide.jit.compile is built on this). Between capture_begin and
 * capture_end every op call, view, autograd gradient assignment and tensor
 * made on this thread is recorded, and still runs as usual. Tensors that
 * existed before the capture and are not arguments are bound by reference:
 * a replay reads and writes those same tensors (model parameters, optimizer
 * state). Reading a value during capture (tide_tensor_get, _to_doubles,
 * _data) fails, and so does the capture. The first replay plans the graph:
 * one arena for its intermediates, each op checked and resolved once; every
 * replay is then one engine task (asynchronous like any op) that runs the ops'
 * kernels wave by wave, independent small ones at once. Graphs whose results
 * need autograd history, that span devices, or calls on non-contiguous
 * arguments or ones sharing memory with bound tensors, replay op by op through
 * tide_op_call instead, with the grad mode each op had; tide_graph_describe
 * says which. A graph is used by one thread at a time.
 */
typedef struct tide_graph tide_graph;

/* Starts recording this thread's ops into a new graph (owned by the caller).
 * NULL if this thread is already capturing. */
tide_graph * tide_graph_capture_begin(void);
/* Declares t the next argument of the graph (replay binds a new tensor of the
 * same shape, dtype and device in its place). Call before t is used. */
tide_status  tide_graph_add_arg(tide_graph * g, tide_tensor * t);
/* Declares t the next output (what replay returns). */
tide_status  tide_graph_add_output(tide_graph * g, tide_tensor * t);
/* Gives the nodes recorded since the last call this origin ("file:line"), for messages. */
tide_status  tide_graph_set_origin(tide_graph * g, const char * where);
/* Stops recording; waits for the captured ops. Fails with the capture's first
 * error (a value read, ...). Writes into leaks (at most n bytes, "" if none) a
 * description of tensors made during capture that something besides the graph
 * still holds, other than outputs and gradients: a replay will not update them. */
tide_status  tide_graph_capture_end(tide_graph * g, char * leaks, size_t n);
/* Replays g on n_args tensors (shapes, dtypes and devices as captured);
 * outputs[0 .. tide_graph_num_outputs) receive new references (+1), new
 * tensors at each replay (or the arguments and bound tensors returned as such).
 * Asynchronous; waits for the replay before the last, so that a loop of
 * replays keeps at most two in flight. */
tide_status  tide_graph_replay(tide_graph * g, tide_tensor * const * args, int32_t n_args, tide_tensor ** outputs);
void         tide_graph_release(tide_graph * g);
int32_t      tide_graph_num_nodes(const tide_graph * g);
int32_t      tide_graph_num_args(const tide_graph * g);
int32_t      tide_graph_num_outputs(const tide_graph * g);
/* Optimisation passes over a captured graph, each switchable. */
enum {
    TIDE_GRAPH_PASS_DCE = 1,   /* drop nodes nothing outside the graph can see */
    TIDE_GRAPH_PASS_CSE = 2,   /* merge nodes that repeat an earlier one */
    TIDE_GRAPH_PASS_FUSE = 4,  /* run chains of elementwise ops as one kernel, one pass over memory */
    TIDE_GRAPH_PASS_FOLD = 8,  /* what depends on constants only is computed once, at capture */
    TIDE_GRAPH_PASS_SIMPLIFY = 16,  /* x*1, x+0, x-0, x/1, permutations that cancel: x itself */
    TIDE_GRAPH_PASS_PLAN = 32, /* replay as one task over one arena planned by liveness (else node by node) */
    TIDE_GRAPH_PASS_ALL = 63
};
/* Runs the passes (a mask of TIDE_GRAPH_PASS_*) after capture_end; *changed
 * (may be NULL) receives how many nodes they removed. */
tide_status  tide_graph_optimize(tide_graph * g, uint32_t passes, int32_t * changed);
/* The peak of the memory a replay holds for the graph's temporaries (outputs
 * included, tensors bound by reference not), and a description of the largest
 * buffers live at that peak with the lines that made them (at most n bytes). */
tide_status  tide_graph_memory(tide_graph * g, int64_t * peak_bytes, char * largest, size_t n);
/* The tensors bound by reference that a replay writes in place (parameters,
 * optimizer state, ...): *n receives their count; returns them borrowed, with
 * origins[i] the line of the last node writing each (NULL if origins is NULL).
 * Valid until the graph is released. */
tide_tensor * const * tide_graph_written(tide_graph * g, int32_t * n, const char ** origins, int32_t max);
/* The graph in Graphviz's DOT language. Owned by g, until the next call on it. */
const char * tide_graph_dot(tide_graph * g);
/* A text listing of the graph: its inputs, one node a line, its outputs, and how
 * it replays (steps, waves, arena bytes; or why op by op). Owned by g. */
const char * tide_graph_describe(tide_graph * g);
/* The tensors bound by reference that a replay of g reads, writes or returns:
 * *n receives their count; returns them borrowed, in the order capture met
 * them, with origins[i] the line of the first node reading each ("" if none;
 * NULL origins: none written). Valid until the graph is released; NULL when out
 * of memory. */
tide_tensor * const * tide_graph_externs(tide_graph * g, int32_t * n, const char ** origins, int32_t max);

/* Checking a graph against the code it was captured from. check_begin starts
 * recording this thread's ops as a capture does (reading values is allowed),
 * and as each op is recorded it replays g up to the node that stands for it and
 * compares what both made, so that the first op whose results differ while its
 * inputs agree can be named. g replays on args (as tide_graph_replay takes
 * them), on copies of the tensors it writes in place, and with a generator of
 * its own that starts from the current state: the recorded code's tensors and
 * random draws are its own. Values match by the node that made them in capture
 * order, which the passes keep. tol: the largest absolute difference taken as
 * equal. Returns the check, owned (release it with tide_graph_release after
 * check_end), or NULL if this thread is capturing already or on error. g must
 * outlive it. Synchronous: every comparison waits for both ops; the check holds
 * every tensor the recorded code makes until it is released. */
tide_graph * tide_graph_check_begin(tide_graph * g, tide_tensor * const * args, int32_t n_args, double tol);
/* Ends check c: replays the rest of its graph, returns the replay's results in
 * outputs[0 .. tide_graph_num_outputs(g)) (+1 each; NULL where the replay
 * failed) and writes into report (at most n bytes; "" when all agreed) the first
 * difference: the op whose results differ while its inputs agree, an op that
 * reads a Lua number or other constant that has changed since capture, or where
 * the recorded code took another path. Fails only if c is not this thread's
 * running check. */
tide_status  tide_graph_check_end(tide_graph * c, tide_tensor ** outputs, char * report, size_t n);
/* The copy check c's replay wrote in place of t (a tensor bound by reference),
 * borrowed, valid while c lives; t itself when the replay did not write it. */
tide_tensor * tide_graph_check_copy(tide_graph * c, tide_tensor * t);

/* -- engine, threads, generator ---------------------------------------- */

/* Waits for every pending op; returns the first failure of an op that ran
 * asynchronously that was not reported yet. A failure is reported once: by the
 * first wait (tide_tensor_wait and the reads that wait) or op call that meets
 * its result or anything computed from it, else by the next tide_sync(), which
 * also drops the other unreported failures (of the first eight it keeps).
 * At exit, libtide runs queued work before the exit handlers that the CUDA
 * libraries its kernels started (cuBLAS, cuDNN, cuSOLVER) registered; work
 * queued from another exit handler, or under a library a host started itself
 * after libtide's last kernel launch, is the host's to wait for: calling
 * tide_sync() before exit() is the sure way (the `tide` program does). */
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
/* The generator's state: its seed and the next unused counter of its Philox
 * stream. Setting a saved state replays the same numbers; the data loader uses
 * it to draw a seeded shuffle without disturbing the global stream. */
void        tide_rng_get_state(uint64_t * seed, uint64_t * offset);
void        tide_rng_set_state(uint64_t seed, uint64_t offset);

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
/* Starts the peak of tide_mem_stats over from what is in use now. */
void        tide_mem_reset_peak(void);

/* Device memory, per device, from its caching allocator: blocks cut from
 * device allocations (segments) and kept for reuse when freed. */
typedef struct tide_devmem_stats {
    int64_t bytes_in_use;      /* in blocks held by tensors (rounded up to 512 bytes) */
    int64_t bytes_cached;      /* in freed blocks kept for reuse */
    int64_t bytes_reserved;    /* taken from the device: in use + cached */
    int64_t peak_in_use;
    int64_t n_allocs;          /* requests served */
    int64_t n_reused;          /* requests served from the cache */
    int64_t n_segments;        /* device allocations held */
    int64_t n_cache_flushes;   /* times the device was full, the cache freed and the request retried */
    int64_t n_ooms;            /* requests that failed even after that */
} tide_devmem_stats;

/* Fills *out for cuda:`device`. TIDE_E_DEVICE, with the reason, when there is
 * no such device (or no CUDA here). Thread-safe. */
tide_status tide_cuda_memory_stats(int32_t device, tide_devmem_stats * out);
/* Returns the cached, unused device memory of cuda:`device` to the driver. */
tide_status tide_cuda_empty_cache(int32_t device);
/* Starts the peak of tide_cuda_memory_stats over from what is in use now. */
tide_status tide_cuda_reset_peak(int32_t device);
/* Whether float32 matmuls on CUDA devices may use TF32 tensor cores (inputs
 * rounded to a 10-bit mantissa, float32 sums): off by default, as in PyTorch.
 * An op takes the setting in force when it is enqueued. Thread-safe. */
void        tide_cuda_set_allow_tf32(int allow);
int         tide_cuda_allow_tf32(void);

/* A text of "key=value" lines: version, BLAS library and kernel set, SIMD
 * level, threads. Borrowed, static. */
const char * tide_config(void);
const char * tide_version(void);

/* -- files: checkpoints and data sets (runtime/src/io/) ------------------ */

/* The readers return tensors on the default CPU device, their data read from
 * the file straight into the new storage (one copy; no mmap). Errors name the
 * function as the Lua module does ("load", "load_npy", ...), the file and what
 * is wrong with it; a corrupt or truncated file is an error, never a crash.
 * The writers write a temporary file beside path, fsync it and rename it over
 * path: a failed save leaves an existing file as it was. All are synchronous
 * and wait for pending writes to the tensors they save. Thread-safe for
 * distinct paths and dicts. */

/* An ordered list of named tensors plus a map of string metadata: what a
 * safetensors or .npz file holds. Owns references to its tensors and copies of
 * its strings. Not thread-safe: one thread at a time uses a dict. */
typedef struct tide_tensor_dict tide_tensor_dict;

tide_tensor_dict * tide_tensor_dict_new(void);                       /* NULL if out of memory */
void               tide_tensor_dict_free(tide_tensor_dict * d);     /* releases its tensors; NULL is a no-op */
/* Appends t (retained) under a copy of name. Names are not checked for
 * duplicates here (tide_safetensors_save does). */
tide_status        tide_tensor_dict_add(tide_tensor_dict * d, const char * name, tide_tensor * t);
/* Sets metadata key to a copy of value, replacing an earlier value of key. */
tide_status        tide_tensor_dict_set_meta(tide_tensor_dict * d, const char * key, const char * value);
int64_t            tide_tensor_dict_count(const tide_tensor_dict * d);
/* Entry i (0-based, in file order for loaded dicts): borrowed, valid while d
 * lives; NULL when i is out of range. */
const char *       tide_tensor_dict_name(const tide_tensor_dict * d, int64_t i);
tide_tensor *      tide_tensor_dict_tensor(const tide_tensor_dict * d, int64_t i);
/* The first tensor named name (borrowed), or NULL. */
tide_tensor *      tide_tensor_dict_find(const tide_tensor_dict * d, const char * name);
int64_t            tide_tensor_dict_meta_count(const tide_tensor_dict * d);
const char *       tide_tensor_dict_meta_key(const tide_tensor_dict * d, int64_t i);
const char *       tide_tensor_dict_meta_value(const tide_tensor_dict * d, int64_t i);

/* Writes d in the safetensors format: an 8-byte little-endian header length,
 * a JSON header padded with spaces to a multiple of 8 bytes, then the tensors'
 * bytes, contiguous and little-endian, ordered by decreasing alignment then by
 * name (as the safetensors library writes them). Dtypes F32 F64 I32 I64 U8
 * BOOL F16 BF16. Fails on duplicate names, the name "__metadata__", strings
 * that are not UTF-8, tensors not on the CPU, I/O errors (TIDE_E_IO). */
tide_status        tide_safetensors_save(const char * path, const tide_tensor_dict * d);
/* Reads a safetensors file: a new dict (free with tide_tensor_dict_free) in
 * the order of the tensors' data, with the file's __metadata__. Checks the
 * header length, the JSON, every dtype, shape and byte count, and that the
 * tensors' byte ranges neither overlap nor leave bytes unused. NULL on failure. */
tide_tensor_dict * tide_safetensors_load(const char * path);

/* NumPy's .npy format (versions 1, 2 and 3). Little- and big-endian data;
 * bool, uint8, int8/16/32/64, uint16/32 (widened to int32/int64), float16/32/64.
 * A fortran_order array is returned as a view with column-major strides.
 * NULL on failure. */
tide_tensor *      tide_npy_load(const char * path);
/* Writes t as .npy version 1.0, C order, little-endian, the data 64-byte
 * aligned. bfloat16 has no NumPy dtype and is refused (TIDE_E_DTYPE). */
tide_status        tide_npy_save(const char * path, tide_tensor * t);
/* An .npz archive (a zip of .npy files, stored or deflated, zip64 included):
 * one tensor per entry, named without ".npy". NULL on failure. */
tide_tensor_dict * tide_npz_load(const char * path);
/* An IDX file (the MNIST format), gzip'd or not: uint8, float32 and float64
 * data keep their type; int8, int16 and int32 become int32. NULL on failure. */
tide_tensor *      tide_idx_load(const char * path);

typedef struct tide_csv_options {
    int32_t delimiter;   /* a byte; 0 for ','; ' ' splits at runs of spaces and tabs */
    int32_t header;      /* 1: the first line names the columns */
    int32_t dtype;       /* of the result */
} tide_csv_options;
/* A CSV file of numbers (gzip'd or not) as a dict with one tensor, "data", of
 * shape [rows, columns]; with opts->header its metadata maps "0", "1", ... to
 * the column names. Empty fields are NaN in float dtypes, an error in integer
 * ones; rows of a different width and fields that are not numbers are errors
 * naming the line and column. opts may be NULL (',', no header, float32). */
tide_tensor_dict * tide_csv_load(const char * path, const tide_csv_options * opts);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TIDE_H */
