/*
 * device.h - what libtide asks of an accelerator backend (libtide_cuda, in
 * runtime/src/cuda/): one table of functions over device memory, streams,
 * events, copies and pinned host memory, in plain C so that nvcc and gcc read
 * it alike. libtide builds its own machinery on top of it (the caching device
 * allocator in devalloc.c, the engine's device queues); the backend keeps no
 * policy of its own. Tests drive the same table with a fake backend on the host.
 */
#ifndef TIDE_DEVICE_H
#define TIDE_DEVICE_H

#include "tide.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the table below changes; libtide refuses a backend built
 * against another version instead of calling through a wrong layout. */
enum { TIDE_DEVAPI_VERSION = 6 };

/* What a backend function returns. On anything but OK the backend keeps a
 * message for its calling thread, which `error_text` returns. */
enum { TIDE_DEVAPI_OK = 0, TIDE_DEVAPI_OOM = 1, TIDE_DEVAPI_ERROR = 2 };

/* Copy directions for copy_async. */
enum { TIDE_COPY_H2D = 1, TIDE_COPY_D2H = 2, TIDE_COPY_D2D = 3 };

/* A tensor as a device kernel sees it: the address of its first element
 * (the view's offset applied) and its sizes and strides in elements. A host
 * number given with device tensors (the 1 of x + 1) has data NULL, ndim 0
 * and its value in `value` (and, exactly, in `ivalue` for integer dtypes). */
typedef struct tide_devtensor {
    void *  data;
    int32_t dtype;                   /* tide_dtype */
    int32_t ndim;
    int64_t nelem;
    int64_t sizes[TIDE_MAX_DIMS];
    int64_t strides[TIDE_MAX_DIMS];
    double  value;
    int64_t ivalue;
} tide_devtensor;

/* What an op's work found wrong on the device, which the launch could not
 * know (an index's value): the work writes it in stream order (copy_async
 * D2H from device memory it filled), and libtide reads it once the device has
 * done the call and raises the op's error, poisoning its results. */
typedef struct tide_devreport {
    int32_t code;                    /* TIDE_DEVREPORT_*; NONE until the work writes one */
    int32_t dim;                     /* INDEX: the dimension (0-based) */
    int64_t value;                   /* INDEX: the index as the user gave it; COUNT: the count found */
    int64_t bound;                   /* INDEX: the size of that dimension; COUNT: the count expected */
    double  real;                    /* PROBABILITY: the value */
    int64_t width;                   /* PLANE: the plane's width (bound is its height) */
} tide_devreport;

enum {
    TIDE_DEVREPORT_NONE  = 0,
    TIDE_DEVREPORT_INDEX = 1,        /* "op: index <value> is out of range for dimension <dim+1> of size <bound>" */
    TIDE_DEVREPORT_COUNT = 2,        /* masked_select: the mask changed while the op was pending */
    TIDE_DEVREPORT_PROBABILITY = 3,  /* "op: probability <real> is outside [0, 1]" */
    TIDE_DEVREPORT_PLANE = 4,        /* "op: index <value> is out of range for an input plane of <bound>x<width>" */
    TIDE_DEVREPORT_LINALG = 5,       /* a factorisation failed: value its info (> 0), bound the batch element
                                      * (0-based), width the batch size (0: no batch dims); tide_linalg_error */
    TIDE_DEVREPORT_ZERO_DIVISOR = 6, /* an integer division by zero: value the divisor's first zero (row-major,
                                      * 0-based); tide_zero_divisor_error */
};

/* One op of the registry (runtime/src/ops/ops.def) as libtide hands it to a
 * device kernel, which only launches it on `stream`: the call's tensors, the
 * dtype the op's rule chose to compute in (float16/bfloat16 storage computes
 * in float32) and the params, whose meaning per op ops.def gives. libtide has
 * validated it all: dtypes against the op's accepted set, shapes by the op's
 * shape rule, and every tensor is on device `dev` (or a host number). */
typedef struct tide_devcall {
    const char *   op;               /* its registry name, for messages */
    int32_t        dev;
    void *         stream;
    int32_t        n_in, n_out;
    int32_t        compute_dtype;
    uint64_t       rng_seed;         /* random ops: their slice of the Philox stream */
    uint64_t       rng_offset;
    /* NULL, or (a random op recorded into a graph, whose every run draws
     * anew) device memory holding {seed, offset}: the slice the work reads
     * when it runs, in place of rng_seed and rng_offset. */
    const void *   rng_at;
    tide_devtensor in[TIDE_OP_MAX_IN];
    tide_devtensor out[TIDE_OP_MAX_OUT];
    tide_op_params p;
    uint32_t       flags;            /* TIDE_DEVCALL_* */
    /* nbytes of device memory for the call's own use (partial sums, a
     * workspace), valid for work launched on `stream` by this call; libtide
     * takes it back after the kernel returns, which stream order makes safe.
     * NULL when the device is out of memory: return TIDE_DEVAPI_OOM then,
     * libtide already holds the message. */
    void * (*scratch)(void * ctx, size_t nbytes);
    void *         scratch_ctx;
    /* The call's report, for the call's work to fill in stream order (see
     * tide_devreport), with a copy whose direction the runtime infers
     * (cudaMemcpyDefault): pinned host memory, or device memory while libtide
     * records the call into a graph (capture_begin). The work writes it whole
     * at every run, code NONE when it found nothing wrong. NULL when libtide
     * has none to give: return TIDE_DEVAPI_OOM then, libtide holds the
     * message. Takes scratch_ctx. At most one per call. */
    tide_devreport * (*report)(void * ctx);
} tide_devcall;

/* tide_devcall.flags: settings of the calling thread that kernels honour. */
enum {
    TIDE_DEVCALL_ALLOW_TF32 = 1,     /* float32 matmuls may use TF32 tensor cores (tide.cuda.allow_tf32) */
};

/* Launches the op on c->stream (it must not wait for the device). Returns
 * TIDE_DEVAPI_OK, or an error with its message in error_text. */
typedef int (*tide_devkernel_fn)(const tide_devcall * c);

/* Streams and events are the backend's handles (cudaStream_t, cudaEvent_t).
 * Every call names its device: the backend makes it current on the calling
 * thread first. */
typedef struct tide_devapi {
    int32_t version;                /* TIDE_DEVAPI_VERSION */
    const char * name;              /* "cuda" */
    /* The number of devices; with none, `reason` says why (never aborts). */
    int32_t (*probe)(char * reason, size_t n);
    const char * (*error_text)(void);

    /* -- memory: raw device allocations (devalloc.c caches them) -- */
    int (*mem_alloc)(int32_t dev, size_t nbytes, void ** out);
    int (*mem_free)(int32_t dev, void * p);
    int (*mem_info)(int32_t dev, size_t * free_bytes, size_t * total_bytes);

    /* -- streams: work on one stream runs in order -- */
    int (*stream_create)(int32_t dev, void ** out);
    int (*stream_destroy)(int32_t dev, void * stream);
    int (*stream_sync)(int32_t dev, void * stream);

    /* -- events: a point in a stream that other streams or the host can wait for -- */
    int (*event_create)(int32_t dev, void ** out);
    int (*event_destroy)(int32_t dev, void * event);
    int (*event_record)(int32_t dev, void * event, void * stream);
    /* 1: everything before the event is done; 0: not yet; -1: error. */
    int (*event_query)(int32_t dev, void * event);
    int (*event_sync)(int32_t dev, void * event);
    /* Later work on `stream` waits for `event` on the device, not on the host. */
    int (*stream_wait_event)(int32_t dev, void * stream, void * event);
    /* fn(arg) runs on a backend thread once everything queued on `stream` before
     * it is done; it must not call the backend. How the engine learns that a
     * device op finished without a host thread blocking on it. */
    int (*host_callback)(int32_t dev, void * stream, void (*fn)(void * arg), void * arg);

    /* -- copies, in stream order; host memory must be pinned for overlap -- */
    int (*copy_async)(int32_t dev, void * dst, const void * src, size_t nbytes, int32_t kind, void * stream);
    int (*pinned_alloc)(size_t nbytes, void ** out);
    int (*pinned_free)(void * p);

    /* -- kernels -- */
    /* The kernel of the registry op named `op`, or NULL when the backend has
     * none, with error_text saying why ("conv2d: cuDNN is not available (...)"). */
    tide_devkernel_fn (*kernel)(const char * op);

    /* -- between devices -- */
    /* Copies nbytes from src on device src_dev to dst on device dst_dev, in the
     * order of `stream` (dst_dev's): directly where the devices can reach each
     * other's memory (peer access, turned on at first use), else through the host. */
    int (*copy_peer)(int32_t dst_dev, void * dst, int32_t src_dev, const void * src, size_t nbytes, void * stream);

    /* -- graphs: a stream's work recorded once, then launched whole -- */
    /* From now until capture_end, the work this thread gives `stream` is
     * recorded, not run (kernels may allocate meanwhile: cudaStreamCaptureModeRelaxed).
     * Scratch a kernel takes while recorded is the graph's for its life. */
    int (*capture_begin)(int32_t dev, void * stream);
    /* Ends the recording; *graph is it, ready to launch, or NULL with an error
     * (a kernel did something a graph cannot hold: the recording is dropped,
     * and the stream runs work again). */
    int (*capture_end)(int32_t dev, void * stream, void ** graph);
    /* Runs the recorded work on `stream`, in its order, as one launch. */
    int (*graph_launch)(int32_t dev, void * graph, void * stream);
    /* Frees a graph; launches already given run to their end. */
    int (*graph_destroy)(int32_t dev, void * graph);

    /* -- kernels libtide writes at run time (a jit plan's fused elementwise chains) -- */
    /* Compiles the CUDA C++ source `src` for dev's architecture (no fused
     * multiply-adds: each operation rounds as its own kernel would), loads it
     * on dev, and finds in it the kernel `name`, declared
     *     extern "C" __global__ void name(ARGS a)
     * for a struct ARGS passed by value, which loops over its elements with a
     * grid-stride loop and so takes any grid. *fn is the kernel's handle,
     * valid while the backend is loaded. Slow (a compiler runs): libtide calls
     * it once per kernel, when it builds a plan. An error (the runtime compiler
     * missing, the source refused) says why in error_text, with the compiler's log. */
    int (*rtc_compile)(int32_t dev, const char * src, const char * name, void ** fn);
    /* Launches kernel fn on `stream`, its parameter the nbytes at `arg` (copied
     * at the launch), over enough threads for n elements (n >= 1). */
    int (*rtc_launch)(int32_t dev, void * fn, const void * arg, size_t nbytes, int64_t n, void * stream);

    /* -- what a device is: tide.h's tide_cuda_props, filled for dev -- */
    int (*device_props)(int32_t dev, tide_cuda_props * out);
} tide_devapi;

/* The symbol a backend library exports: its table, or NULL when it was built
 * for another TIDE_DEVAPI_VERSION than `version`. */
typedef const tide_devapi * (*tide_devapi_get_fn)(int32_t version);

#ifdef __cplusplus
}
#endif

#endif
