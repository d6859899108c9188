/*
 * kernels.h - what the CPU kernel files share: the elementwise iterator that
 * takes care of broadcasting, strides, dtype conversion and threads, so an
 * elementwise kernel is only its inner loop over contiguous arrays, and
 * helpers to walk strided tensors. Shape and dtype checks happen before a
 * kernel runs (registry.c); kernels check only what depends on the data.
 */
#ifndef TIDE_KERNELS_H
#define TIDE_KERNELS_H

#include "../../core/internal.h"

#include <math.h>

/* An inner loop: out[i] = f(in0[i], in1[i], ...) for i in [0, n), all arrays
 * contiguous, inputs in the op's compute dtype, out in the loop's out dtype.
 * index0 is the row-major index of element 0 in the whole output (random ops
 * draw counter index0 + i); c gives the params. */
typedef void (*tide_ew_loop)(int64_t n, int64_t index0, void * restrict out, const void * const * in,
                             const tide_opcall * c);

/* registry.c's shape rules that kernel files' own rules end with: the shape
 * of the first input (with ints[0] a dim of it, normalised); sizes from
 * params.ints, checked non-negative. */
tide_status tide_shape_first(tide_opcall * c, tide_shape_out * o);
tide_status tide_shape_first_dim(tide_opcall * c, tide_shape_out * o);
tide_status tide_shape_sizes(tide_opcall * c, tide_shape_out * o);

/* Runs loops[compute_dtype] over c->out[0] with the inputs broadcast to its
 * shape. out_dtype is what the loop writes: -1 for the compute dtype, or a
 * fixed one (TIDE_DTYPE_BOOL for comparisons). A NULL loop is a dtype error. */
TIDE_INTERNAL tide_status tide_ew_run(const tide_opcall * c, const tide_ew_loop * loops, int32_t out_dtype);
/* When c copies a transposed matrix into a contiguous one of the same dtype (4 or
 * 8 bytes an element; autograd's weight gradients), does so by tiles across the
 * pool and returns true; otherwise returns false and does nothing. */
TIDE_INTERNAL bool tide_ew_transpose(const tide_opcall * c);

/* A fused kernel: elementwise steps over one shape, run block by block so that
 * what one step makes is still in cache when the next reads it, and memory is read
 * and written once (graph/pass_fuse.c builds them). Inputs broadcast to the
 * steps' shape. The result is the last step's, written to `out` (a new tensor,
 * or the tensor the steps update in place), or, with reduce_op set, its sum or
 * mean over all elements or over the last dim, which is then never stored. */
enum { TIDE_FUSED_MAX_STEPS = 16 };
typedef struct tide_fused_step {
    tide_opcall  c;                      /* op, n_in, compute_dtype, params: what the loop reads */
    tide_ew_loop loop;
    tide_ew_loop k_loop;                 /* the loop with the last input a constant (binary.c's fused
                                          * updates), used as eager does when that input has one element */
    int32_t      src[TIDE_OP_MAX_IN];    /* >= 0: external input; < 0: the result of step -src-1 */
    int32_t      slot;                   /* the block buffer the result goes to */
    int32_t      writes_out;             /* the op updated out in place (a run that ends updating it) */
} tide_fused_step;
typedef struct tide_fused {
    int32_t         n_steps, n_ext, n_slots;
    int32_t         dtype;               /* the result's: every step's compute dtype, or for float16 and
                                          * bfloat16 the dtype each step's float32 result is rounded to */
    int32_t         ndim;                /* the shape the steps run over: out's, unless reduced */
    int64_t         sizes[TIDE_MAX_DIMS];
    int32_t         reduce_op;           /* -1, or TIDE_OP_sum / TIDE_OP_mean of the last step's result */
    int32_t         reduce_rows;         /* 1: over the last dim (one result per row); 0: over all */
    uint32_t        late;                /* bit k: input k is read after a step first updated out */
    void *          dev_fn;              /* a chain on a CUDA device: its compiled kernel (graph/fuse_cuda.c) */
    tide_fused_step steps[TIDE_FUSED_MAX_STEPS];
} tide_fused;

/* Runs f into out, reading ext[0 .. f->n_ext) broadcast to f's shape. Blocks
 * write out once, after all their steps; when an input shares out's memory other
 * than as the same view read before the first update, the steps run one after
 * the other over whole temporaries instead, each update stored before the next
 * step reads, as the ops unfused would. Sums and means follow reduce.c's order
 * (16 lanes, 65536-element chunks, in double), so they equal eager's bit for bit.
 * Fails only when out of memory. */
TIDE_INTERNAL tide_status tide_ew_run_fused(const tide_fused * f, tide_tensor * const * ext, tide_tensor * out);

/* The order of float sums (reduce.c, and fused reductions in ew.c): a run of
 * elements is split into chunks, each summed in LANES interleaved accumulators. */
enum { TIDE_REDUCE_CHUNK = 65536, TIDE_REDUCE_LANES = 16 };

/* Elements per block of the general (strided or converting) path: the block's
 * buffers stay in L1/L2 while the inner loop runs. */
enum { TIDE_EW_BLOCK = 2048 };
/* Elements below which a loop is not worth splitting across threads. */
enum { TIDE_GRAIN = 32768 };

/* -- strided walking ---------------------------------------------------------------------- */

/* Offset (in elements, from the tensor's offset) of row-major element i of a view. */
static inline int64_t tide_elem_offset(int32_t ndim, const int64_t * sizes, const int64_t * strides, int64_t i) {
    int64_t off = 0;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        int64_t s = sizes[d];
        off += (i % s) * strides[d];
        i /= s;
    }
    return off;
}

/* Dispatch helpers: call a macro with (dtype enum, C type) for each compute dtype. */
#define TIDE_FOR_FLOAT(M) M(TIDE_DTYPE_F32, float) M(TIDE_DTYPE_F64, double)
#define TIDE_FOR_INT(M)   M(TIDE_DTYPE_I32, int32_t) M(TIDE_DTYPE_I64, int64_t) M(TIDE_DTYPE_U8, uint8_t)
#define TIDE_FOR_NUM(M)   TIDE_FOR_FLOAT(M) TIDE_FOR_INT(M)
#define TIDE_FOR_ALL(M)   TIDE_FOR_NUM(M) M(TIDE_DTYPE_BOOL, uint8_t)

/* TIDE_SIMD_CLONES (loops compiled for several instruction sets) is in core/internal.h. */

#endif /* TIDE_KERNELS_H */
