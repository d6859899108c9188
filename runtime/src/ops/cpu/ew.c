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
    size_t bsz = tide_esize(s->want[k]), esz = tide_esize(s->dtype[k]);
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
            in[k - 1] = s->base[k] + b * (int64_t)tide_esize(s->want[k]);
        s->loop(e - b, b, s->base[0] + b * (int64_t)tide_esize(s->want[0]), in, s->c);
        return;
    }
    /* block buffers: 8 bytes per element covers every compute dtype */
    _Alignas(64) char bufs[MAX_OPS][TIDE_EW_BLOCK * 8];
    for (int32_t k = 1; k < s->n_ops; k++) {
        if (!s->scalar[k]) continue;
        size_t sz = tide_esize(s->want[k]);
        tide_convert(bufs[k], s->want[k], 1, s->base[k], s->dtype[k], 1, 1);
        int64_t fill = e - b < TIDE_EW_BLOCK ? e - b : TIDE_EW_BLOCK;
        for (int64_t i = 1; i < fill; i++) memcpy(bufs[k] + i * (int64_t)sz, bufs[k], sz);
    }
    for (int64_t pos = b; pos < e; pos += TIDE_EW_BLOCK) {
        int64_t len = e - pos < TIDE_EW_BLOCK ? e - pos : TIDE_EW_BLOCK;
        for (int32_t k = 1; k < s->n_ops; k++) {
            size_t sz = tide_esize(s->want[k]);
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
            s->loop(len, pos, s->base[0] + pos * (int64_t)tide_esize(s->want[0]), in, s->c);
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
    int64_t       n   = out->nelem;
    if (n == 0) return TIDE_OK;
    ew_state s;
    s.c     = c;
    s.loop  = loop;
    s.n_ops = 1 + c->n_in;
    /* The common case first: every operand contiguous, of the result's size
     * (so none broadcasts) and in the loop's dtype: one flat run
     * (a one-element input, such as a wrapped Lua number, is repeated in a small buffer). */
    enum { SMALL = 64 };
    _Alignas(64) char small[MAX_OPS][SMALL * 8];
    bool flat = true;
    for (int32_t k = 0; k < s.n_ops && flat; k++) {
        const tide_tensor * t = k ? c->in[k - 1] : out;
        int32_t want = k ? ct : (out_dtype < 0 ? ct : out_dtype);
        s.want[k] = want;
        if (t->nelem == n && t->dtype_id == want && tide_tensor_is_contiguous(t)) {
            s.base[k] = (char *)tide_tensor_ptr(t);
        } else if (k && t->nelem == 1 && n <= SMALL) {
            size_t sz = tide_esize(want);
            tide_convert(small[k], want, 1, tide_tensor_ptr(t), t->dtype_id, 1, 1);
            for (int64_t i = 1; i < n; i++) memcpy(small[k] + i * (int64_t)sz, small[k], sz);
            s.base[k] = small[k];
        } else {
            flat = false;
        }
    }
    if (flat) {
        s.all_direct = true;
        if (n < 2 * TIDE_GRAIN) run_range(&s, 0, n);
        else tide_parallel_for(n, TIDE_GRAIN, 64, run_range, &s);
        return TIDE_OK;
    }
    for (int32_t k = 0; k < s.n_ops; k++) {
        const tide_tensor * t = k ? c->in[k - 1] : out;
        aligned_strides(t, out, s.strides[k]);
        s.base[k]  = t->storage->data;
        s.base[k] += t->offset * (int64_t)tide_esize(t->dtype_id);
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
    /* Each block costs a few conversions and the loop: split only large work. */
    tide_parallel_for(n, TIDE_GRAIN, 64, run_range, &s);
    return TIDE_OK;
}

/* -- fused kernels -------------------------------------------------------------------------- */

typedef struct {
    const tide_fused * f;
    ew_state           s;   /* operand 0 is the output, 1 .. n_ext the external inputs */
} fused_state;

static void run_fused_range(void * ctx, int64_t b, int64_t e) {
    const fused_state * fs = ctx;
    const ew_state *    s  = &fs->s;
    const tide_fused *  f  = fs->f;
    size_t esz = tide_esize(f->dtype);
    /* one block buffer per external input that needs gathering, per step result, and the
     * output; small ranges (a few elements) keep them on the stack */
    int64_t blk   = e - b < TIDE_EW_BLOCK ? e - b : TIDE_EW_BLOCK;
    size_t  bytes = ((size_t)blk * 8 + 63) / 64 * 64, total = (size_t)(s->n_ops + f->n_steps) * bytes;
    _Alignas(64) char small[4096];
    char * mem = total <= sizeof small ? small : aligned_alloc(64, total);
    if (!mem) return;   /* cannot happen in practice; the result is left as it was */
    char * ext_buf[MAX_OPS], * step_buf[TIDE_FUSED_MAX_STEPS];
    for (int32_t k = 0; k < s->n_ops; k++) ext_buf[k] = mem + (size_t)k * bytes;
    for (int32_t i = 0; i < f->n_steps; i++) step_buf[i] = mem + (size_t)(s->n_ops + i) * bytes;
    for (int32_t k = 1; k < s->n_ops; k++) {   /* one element broadcast everywhere: filled once */
        if (!s->scalar[k]) continue;
        size_t sz = tide_esize(s->want[k]);
        tide_convert(ext_buf[k], s->want[k], 1, s->base[k], s->dtype[k], 1, 1);
        for (int64_t i = 1; i < blk; i++) memcpy(ext_buf[k] + i * (int64_t)sz, ext_buf[k], sz);
    }
    const void * ext[MAX_OPS];
    for (int64_t pos = b; pos < e; pos += TIDE_EW_BLOCK) {
        int64_t len = e - pos < TIDE_EW_BLOCK ? e - pos : TIDE_EW_BLOCK;
        for (int32_t k = 1; k < s->n_ops; k++) {
            if (s->direct[k]) {
                ext[k] = s->base[k] + pos * (int64_t)esz;
            } else if (s->scalar[k]) {
                ext[k] = ext_buf[k];
            } else {
                move_block(s, k, ext_buf[k], pos, len, false);
                ext[k] = ext_buf[k];
            }
        }
        for (int32_t i = 0; i < f->n_steps; i++) {
            const tide_fused_step * st = &f->steps[i];
            const void * in[TIDE_OP_MAX_IN];
            for (int32_t k = 0; k < st->c.n_in; k++)
                in[k] = st->src[k] >= 0 ? ext[1 + st->src[k]] : step_buf[-st->src[k] - 1];
            bool last = i == f->n_steps - 1;
            void * out = !last ? step_buf[i] : s->direct[0] ? s->base[0] + pos * (int64_t)esz : ext_buf[0];
            st->loop(len, pos, out, in, &st->c);
        }
        if (!s->direct[0]) move_block(s, 0, ext_buf[0], pos, len, true);
    }
    if (mem != small) free(mem);
}

tide_status tide_ew_run_fused(const tide_fused * f, tide_tensor * const * ext, tide_tensor * out) {
    if (out->nelem == 0) return TIDE_OK;
    fused_state fs;
    ew_state *  s = &fs.s;
    fs.f     = f;
    s->c     = NULL;
    s->loop  = NULL;
    s->n_ops = 1 + f->n_ext;
    for (int32_t k = 0; k < s->n_ops; k++) {
        const tide_tensor * t = k ? ext[k - 1] : out;
        aligned_strides(t, out, s->strides[k]);
        s->base[k]   = (char *)t->storage->data + t->offset * (int64_t)tide_esize(t->dtype_id);
        s->dtype[k]  = t->dtype_id;
        s->want[k]   = f->dtype;
        s->scalar[k] = k && t->nelem == 1;
    }
    coalesce(s, out);
    for (int32_t k = 0; k < s->n_ops; k++) {
        bool    contiguous = true;
        int64_t expect = 1;
        for (int32_t d = s->nd - 1; d >= 0 && contiguous; d--) {
            contiguous = s->strides[k][d] == expect || s->sizes[d] == 1;
            expect *= s->sizes[d];
        }
        s->direct[k] = contiguous && s->dtype[k] == s->want[k];
        if (s->direct[k]) s->scalar[k] = false;
    }
    tide_parallel_for(out->nelem, TIDE_GRAIN, TIDE_EW_BLOCK, run_fused_range, &fs);
    return TIDE_OK;
}
