/*
 * ew.c - the elementwise iterator. Given an op call whose output has the
 * broadcast shape, it coalesces dimensions, splits the elements across the
 * pool, and feeds an op's inner loop with contiguous arrays: directly from
 * memory when an operand is contiguous in the compute dtype, otherwise through
 * block buffers that gather (and convert) strided or broadcast inputs and
 * scatter the result. The inner loops themselves live in the op family files.
 */
#include "kernels.h"

#include <stdlib.h>

enum { MAX_OPS = 1 + TIDE_OP_MAX_IN };

typedef struct {
    const tide_opcall * c;
    tide_ew_loop        loop;
    int32_t             n_ops;            /* out + inputs */
    int32_t             nd;
    int64_t             sizes[TIDE_MAX_DIMS];
    int64_t             strides[MAX_OPS][TIDE_MAX_DIMS];
    char *              base[MAX_OPS];
    int32_t             dtype[MAX_OPS];   /* storage dtype of each operand */
    int32_t             want[MAX_OPS];    /* dtype the loop reads or writes */
    bool                direct[MAX_OPS];  /* contiguous over the output, in the wanted dtype */
    bool                scalar[MAX_OPS];  /* one element broadcast everywhere */
    bool                all_direct;
} ew_state;

/* Strides of operand t aligned to the output's shape, 0 where it broadcasts. */
static void aligned_strides(const tide_tensor * t, const tide_tensor * out, int64_t * st) {
    for (int32_t d = 0; d < out->ndim; d++) {
        int32_t j = t->ndim - out->ndim + d;
        st[d] = (j >= 0 && t->sizes[j] != 1) ? t->strides[j] : 0;
    }
}

static void coalesce(ew_state * s, const tide_tensor * out) {
    int32_t nd = 0;
    for (int32_t d = 0; d < out->ndim; d++) {
        if (out->sizes[d] == 1) continue;   /* size-1 dims add nothing */
        s->sizes[nd] = out->sizes[d];
        for (int32_t k = 0; k < s->n_ops; k++) s->strides[k][nd] = s->strides[k][d];
        nd++;
    }
    if (nd == 0) {   /* a single element */
        s->sizes[0] = 1;
        for (int32_t k = 0; k < s->n_ops; k++) s->strides[k][0] = 0;
        s->nd = 1;
        return;
    }
    int32_t w = 0;   /* merge d into w when every operand steps through both as one */
    for (int32_t d = 1; d < nd; d++) {
        bool merge = true;
        for (int32_t k = 0; k < s->n_ops && merge; k++)
            merge = s->strides[k][w] == s->strides[k][d] * s->sizes[d];
        if (merge) {
            s->sizes[w] *= s->sizes[d];
            for (int32_t k = 0; k < s->n_ops; k++) s->strides[k][w] = s->strides[k][d];
        } else {
            w++;
            s->sizes[w] = s->sizes[d];
            for (int32_t k = 0; k < s->n_ops; k++) s->strides[k][w] = s->strides[k][d];
        }
    }
    s->nd = w + 1;
}

/* Copies len elements starting at row-major index start of a strided operand
 * into a contiguous buffer (or, with to_strided, the other way), converting dtype. */
static void move_block(const ew_state * s, int32_t k, char * buf, int64_t start, int64_t len, bool to_strided) {
    int32_t nd = s->nd;
    const int64_t * st = s->strides[k];
    int64_t idx[TIDE_MAX_DIMS], off = 0, tmp = start;
    for (int32_t d = nd - 1; d >= 0; d--) {
        idx[d] = tmp % s->sizes[d];
        tmp /= s->sizes[d];
        off += idx[d] * st[d];
    }
    size_t bsz = tide_dtype_size(s->want[k]), esz = tide_dtype_size(s->dtype[k]);
    while (len > 0) {
        int64_t run = s->sizes[nd - 1] - idx[nd - 1];
        if (run > len) run = len;
        char * mem = s->base[k] + off * (int64_t)esz;
        if (to_strided)
            tide_convert(mem, s->dtype[k], st[nd - 1], buf, s->want[k], 1, run);
        else
            tide_convert(buf, s->want[k], 1, mem, s->dtype[k], st[nd - 1], run);
        buf += run * (int64_t)bsz;
        len -= run;
        off += run * st[nd - 1];
        idx[nd - 1] += run;
        for (int32_t d = nd - 1; d > 0 && idx[d] == s->sizes[d]; d--) {
            off -= s->sizes[d] * st[d];
            idx[d] = 0;
            idx[d - 1]++;
            off += st[d - 1];
        }
    }
}

static void run_range(void * ctx, int64_t b, int64_t e) {
    const ew_state * s = ctx;
    const void *     in[TIDE_OP_MAX_IN];
    if (s->all_direct) {
        for (int32_t k = 1; k < s->n_ops; k++)
            in[k - 1] = s->base[k] + b * (int64_t)tide_dtype_size(s->want[k]);
        s->loop(e - b, b, s->base[0] + b * (int64_t)tide_dtype_size(s->want[0]), in, s->c);
        return;
    }
    /* block buffers: 8 bytes per element covers every compute dtype */
    _Alignas(64) char bufs[MAX_OPS][TIDE_EW_BLOCK * 8];
    for (int32_t k = 1; k < s->n_ops; k++) {
        if (!s->scalar[k]) continue;
        size_t sz = tide_dtype_size(s->want[k]);
        tide_convert(bufs[k], s->want[k], 1, s->base[k], s->dtype[k], 1, 1);
        int64_t fill = e - b < TIDE_EW_BLOCK ? e - b : TIDE_EW_BLOCK;
        for (int64_t i = 1; i < fill; i++) memcpy(bufs[k] + i * (int64_t)sz, bufs[k], sz);
    }
    for (int64_t pos = b; pos < e; pos += TIDE_EW_BLOCK) {
        int64_t len = e - pos < TIDE_EW_BLOCK ? e - pos : TIDE_EW_BLOCK;
        for (int32_t k = 1; k < s->n_ops; k++) {
            size_t sz = tide_dtype_size(s->want[k]);
            if (s->direct[k]) {
                in[k - 1] = s->base[k] + pos * (int64_t)sz;
            } else if (s->scalar[k]) {
                in[k - 1] = bufs[k];
            } else {
                move_block(s, k, bufs[k], pos, len, false);
                in[k - 1] = bufs[k];
            }
        }
        if (s->direct[0]) {
            s->loop(len, pos, s->base[0] + pos * (int64_t)tide_dtype_size(s->want[0]), in, s->c);
        } else {
            s->loop(len, pos, bufs[0], in, s->c);
            move_block(s, 0, bufs[0], pos, len, true);
        }
    }
}

tide_status tide_ew_run(const tide_opcall * c, const tide_ew_loop * loops, int32_t out_dtype) {
    int32_t ct = c->compute_dtype;
    tide_ew_loop loop = loops[ct];
    if (!loop)
        return tide_error_set(TIDE_E_DTYPE, "%s: dtype %s is not supported", tide_op_name(c->op), tide_dtype_name(ct));
    tide_tensor * out = c->out[0];
    if (out->nelem == 0) return TIDE_OK;
    ew_state s;
    s.c     = c;
    s.loop  = loop;
    s.n_ops = 1 + c->n_in;
    for (int32_t k = 0; k < s.n_ops; k++) {
        const tide_tensor * t = k ? c->in[k - 1] : out;
        aligned_strides(t, out, s.strides[k]);
        s.base[k]  = t->storage->data;
        s.base[k] += t->offset * (int64_t)tide_dtype_size(t->dtype_id);
        s.dtype[k] = t->dtype_id;
        s.want[k]  = k ? ct : (out_dtype < 0 ? ct : out_dtype);
        s.scalar[k] = k && t->nelem == 1;
    }
    coalesce(&s, out);
    s.all_direct = true;
    for (int32_t k = 0; k < s.n_ops; k++) {
        bool contiguous = true;
        int64_t expect = 1;
        for (int32_t d = s.nd - 1; d >= 0 && contiguous; d--) {
            contiguous = s.strides[k][d] == expect || s.sizes[d] == 1;
            expect *= s.sizes[d];
        }
        s.direct[k] = contiguous && s.dtype[k] == s.want[k];
        if (s.direct[k]) s.scalar[k] = false;
        s.all_direct &= s.direct[k];
    }
    int64_t n = out->nelem;
    /* Each block costs a few conversions and the loop: split only large work. */
    tide_parallel_for(n, TIDE_GRAIN, 64, run_range, &s);
    return TIDE_OK;
}
