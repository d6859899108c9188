/*
 * nn.h - what the convolution (conv.c) and pooling (pool.c) kernels share:
 * the NCHW checks and messages of their shape rules, PyTorch's output-size
 * formula, and tensors seen in the compute dtype (read in place when they
 * already are, else through a converted contiguous copy). conv.c defines the
 * functions; the kernels themselves stay in their own files.
 */
#ifndef TIDE_NN_H
#define TIDE_NN_H

#include "kernels.h"

/* -- shape-rule helpers (messages name the op and the values) ------------------------------- */

/* t is 4-d; what names it in the message ("input", "weight", "grad_output"). */
TIDE_INTERNAL tide_status tide_nn_need_4d(const char * op, const tide_tensor * t, const char * what);
/* t (whose role is what) is a float tensor, and the op computes in its dtype:
 * the ops that take several tensors use the FLOAT dtype rule, so that an
 * integer input is reported here, by name, rather than as a promoted dtype. */
TIDE_INTERNAL tide_status tide_nn_need_float(const tide_opcall * c, const tide_tensor * t, const char * what);
/* t has the dtype of the op's first input, whose role is first_what. */
TIDE_INTERNAL tide_status tide_nn_need_dtype(const char * op, const tide_tensor * t, const char * what,
                                             const tide_tensor * first, const char * first_what);
/* params.ints holds exactly n values, described by `layout` in the message. */
TIDE_INTERNAL tide_status tide_nn_need_ints(const tide_opcall * c, int32_t n, const char * layout);
/* The pair (ints[i], ints[i+1]) is >= min (1: positive, 0: non-negative). */
TIDE_INTERNAL tide_status tide_nn_need_pair(const tide_opcall * c, int32_t i, int64_t min, const char * what);
/* Sizes ints[i..i+3] of a tensor the op does not get (x in a backward) are >= 0. */
TIDE_INTERNAL tide_status tide_nn_need_sizes(const tide_opcall * c, int32_t i, const char * what);
/* grad_output's shape is the forward's result shape; `forward` names the forward op. */
TIDE_INTERNAL tide_status tide_nn_need_grad_shape(const tide_opcall * c, const tide_tensor * gy, const int64_t * want,
                                                  const char * forward, const int64_t * x_sizes);

/* PyTorch's pooling_output_shape: floor (or ceil, with the last window
 * starting inside the input or its left padding) of
 * (in + 2p - d(k-1) - 1) / s, plus 1. May be <= 0: the caller's error. */
static inline int64_t tide_nn_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t q   = num / s;
    if (num % s != 0 && num < 0) q--;   /* rounds toward -infinity */
    int64_t o = q + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

/* -- tensors in the compute dtype -------------------------------------------------------------- */

/* A 4-d tensor as element pointer and strides (in elements) in dtype ct. */
typedef struct {
    char *  base;
    int64_t s[4];
    void *  tmp;      /* a converted contiguous copy we own, or NULL */
    size_t  cap;
} tide_nn_view;

/* Reads t in dtype ct: in place when t has that dtype (and, with contig, is
 * contiguous), else as a converted contiguous copy. t may have any ndim; s[]
 * is meaningful for 4-d tensors only. */
TIDE_INTERNAL tide_status tide_nn_view_in(tide_nn_view * v, const tide_tensor * t, int32_t ct, int contig,
                                          const char * op);
/* Where a kernel writes out in dtype ct: out itself when it has that dtype
 * (and, with contig, is contiguous), else a contiguous buffer that
 * tide_nn_view_out_end converts into out. */
TIDE_INTERNAL tide_status tide_nn_view_out(tide_nn_view * v, const tide_tensor * out, int32_t ct, int contig,
                                           const char * op);
TIDE_INTERNAL void        tide_nn_view_out_end(tide_nn_view * v, tide_tensor * out, int32_t ct);
TIDE_INTERNAL void        tide_nn_view_free(tide_nn_view * v);

#endif /* TIDE_NN_H */
