/*
 * ew.c - the elementwise iterator. Given an op call whose output has the
 * broadcast shape, it coalesces dimensions, splits the elements across the
 * pool, and feeds an op's inner loop with contiguous arrays: directly from
 * memory when an operand is contiguous in the compute dtype, otherwise through
 * block buffers that gather (and convert) strided or broadcast inputs and
 * scatter the result. The fused kernels of captured graphs run several ops'
 * loops block by block here too, and may end in a sum or mean. The inner loops
 * themselves live in the op family files.
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

/* Strides of operand t aligned to an ndim-d result, 0 where it broadcasts. */
static void aligned_strides(const tide_tensor * t, int32_t ndim, int64_t * st) {
    for (int32_t d = 0; d < ndim; d++) {
        int32_t j = t->ndim - ndim + d;
        st[d] = (j >= 0 && t->sizes[j] != 1) ? t->strides[j] : 0;
    }
}

/* Iterates over `sizes` with as few dims as the operands' strides allow. */
static void coalesce(ew_state * s, int32_t ndim, const int64_t * sizes) {
    int32_t nd = 0;
    for (int32_t d = 0; d < ndim; d++) {
        if (sizes[d] == 1) continue;   /* size-1 dims add nothing */
        s->sizes[nd] = sizes[d];
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

/* Whether operand k steps through the iteration in row-major order, one element at a time. */
static bool contiguous(const ew_state * s, int32_t k) {
    int64_t expect = 1;
    for (int32_t d = s->nd - 1; d >= 0; d--) {
        if (s->strides[k][d] != expect && s->sizes[d] != 1) return false;
        expect *= s->sizes[d];
    }
    return true;
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

/* -- transposing copies ------------------------------------------------------------------------ */

/* out[i][j] = in[i + j * s] over rows [b, e) of an M x N result, a TL x TL
 * block at a time through a buffer in L1: the block's input columns are read
 * as contiguous runs, then its output rows written as contiguous runs. Writing
 * a tile's rows one element at a time straight into the result (as this once
 * did) keeps TL output lines live at a stride of N elements, which a power
 * of two such as 2048 maps onto one cache set: 2048x2048 floats took 11.5 ms,
 * 11x a plain copy. Through the iterator's gather, a transpose ran at a third
 * of a plain copy's speed. TL is 64 for 4-byte elements (16 KiB of buffer; 20%
 * faster than 32 on 2048x2048 floats) and 32 for 8-byte ones, so that the
 * buffer stays in L1. */
enum { TILE4 = 64, TILE8 = 32 };
typedef struct { char * out; const char * in; int64_t M, N, s; size_t esz; } transpose_job;

#define TRANSPOSE_TILES(name, T, TL)                                                              \
    static void name(T * restrict out, const T * restrict in, int64_t b, int64_t e, int64_t N,      \
                     int64_t s) {                                                                    \
        T buf[TL][TL];                                                                              \
        for (int64_t i0 = b; i0 < e; i0 += TL) {                                                    \
            int64_t rows = e - i0 < TL ? e - i0 : TL;                                                \
            for (int64_t j0 = 0; j0 < N; j0 += TL) {                                                \
                int64_t cols = N - j0 < TL ? N - j0 : TL;                                            \
                for (int64_t j = 0; j < cols; j++) {                                                \
                    const T * restrict x = in + (j0 + j) * s + i0;                                   \
                    for (int64_t i = 0; i < rows; i++) buf[i][j] = x[i];                            \
                }                                                                                   \
                for (int64_t i = 0; i < rows; i++) {                                                \
                    T * restrict o = out + (i0 + i) * N + j0;                                        \
                    for (int64_t j = 0; j < cols; j++) o[j] = buf[i][j];                            \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }
TRANSPOSE_TILES(transpose_4, uint32_t, TILE4)
TRANSPOSE_TILES(transpose_8, uint64_t, TILE8)

static void transpose_rows(void * ctx, int64_t b, int64_t e) {
    const transpose_job * t = ctx;
    if (t->esz == 4) transpose_4((uint32_t *)t->out, (const uint32_t *)t->in, b, e, t->N, t->s);
    else transpose_8((uint64_t *)t->out, (const uint64_t *)t->in, b, e, t->N, t->s);
}

bool tide_ew_transpose(const tide_opcall * c) {
    const tide_tensor * in = c->in[0], * out = c->out[0];
    size_t              esz = tide_esize(in->dtype_id);
    if (c->n_in != 1 || in->dtype_id != out->dtype_id || (esz != 4 && esz != 8) || in->nelem != out->nelem ||
        in->nelem < 2 * TILE8 * TILE8 || !tide_tensor_is_contiguous(out))   /* smaller: the iterator */
        return false;
    ew_state s;
    s.n_ops = 2;
    aligned_strides(out, out->ndim, s.strides[0]);
    aligned_strides(in, out->ndim, s.strides[1]);
    coalesce(&s, out->ndim, out->sizes);
    /* after coalescing: out [M, N] row-major, in running down the rows (stride 1) */
    if (s.nd != 2 || s.strides[1][0] != 1 || s.strides[0][1] != 1 || s.strides[1][1] < s.sizes[0]) return false;
    transpose_job t = {tide_tensor_ptr(out), tide_tensor_ptr(in), s.sizes[0], s.sizes[1], s.strides[1][1], esz};
    int64_t tl = esz == 4 ? TILE4 : TILE8, grain = (TIDE_GRAIN / (t.N > 0 ? t.N : 1) + tl) / tl * tl;
    tide_parallel_for(t.M, grain, tl, transpose_rows, &t);
    return true;
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
        aligned_strides(t, out->ndim, s.strides[k]);
        s.base[k]  = t->storage->data;
        s.base[k] += t->offset * (int64_t)tide_esize(t->dtype_id);
        s.dtype[k] = t->dtype_id;
        s.want[k]  = k ? ct : (out_dtype < 0 ? ct : out_dtype);
        s.scalar[k] = k && t->nelem == 1;
    }
    coalesce(&s, out->ndim, out->sizes);
    s.all_direct = true;
    for (int32_t k = 0; k < s.n_ops; k++) {
        s.direct[k] = contiguous(&s, k) && s.dtype[k] == s.want[k];
        if (s.direct[k]) s.scalar[k] = false;
        s.all_direct &= s.direct[k];
    }
    /* Each block costs a few conversions and the loop: split only large work. */
    tide_parallel_for(n, TIDE_GRAIN, 64, run_range, &s);
    return TIDE_OK;
}

/* -- fused kernels -------------------------------------------------------------------------- */

/* Elements per block of a fused kernel: 8 KiB of float32 per buffer, and a linear
 * chain keeps three step buffers per thread (a step does not write the buffer it
 * reads), so they stay in L1 and L2 while the call per step costs little next to its
 * loop. On bench/jit_bench.lua's 10-op chain (EPYC, one thread) blocks of 512 to
 * 8192 elements came within 10% of each other, 2048 the fastest on tensors that fit
 * L2. A broadcast input that repeats every P <= PATTERN_MAX elements (a bias row,
 * a scalar) is laid out once per thread, P + BLOCK long, and read at offset pos % P:
 * no gathering per block; a column ([N,1] against [N,C]) is filled row by row. */
enum { FUSED_BLOCK = 2048, PATTERN_MAX = 4 * FUSED_BLOCK, DEAL = 16 * FUSED_BLOCK, LANES = TIDE_REDUCE_LANES };

typedef struct {
    const tide_fused * f;
    ew_state           s;       /* operand 0: the result (a contiguous stand-in when reducing); 1..: inputs */
    int32_t            ct;      /* the steps' compute dtype: f->dtype, or float32 for a float16/bfloat16 chain */
    bool               round;   /* f->dtype is float16/bfloat16: each step's result is rounded to it */
    size_t             esz;     /* of ct */
    int64_t            n;                               /* elements the steps run over */
    atomic_llong       next;                            /* the first element no thread has taken */
    int64_t            period[MAX_OPS];                 /* > 0: input k repeats its first period[k] elements */
    bool               column[MAX_OPS];                 /* input k is a column: each element repeated along
                                                         * the last of two dims ([N,1] against [N,C]) */
    tide_opcall        call[TIDE_FUSED_MAX_STEPS];      /* each step's call; a k-loop's holds its constant */
    tide_ew_loop       loop[TIDE_FUSED_MAX_STEPS];
    int64_t            R, nch;                          /* reductions: row length, chunks per row */
    double *           part;                            /* rows x nch partial sums, when rows are chunked */
    tide_tensor *      out;
    atomic_int         oom;
} fused_state;

/* One thread's block buffers: a slot per live step result, and per input not read in place
 * its gathered block or its laid-out pattern ([0]: the result's block when not written in place). */
typedef struct {
    char * mem;
    char * slot[TIDE_FUSED_MAX_STEPS];
    char * in[MAX_OPS];
    _Alignas(64) char small[4096];   /* enough for a range of a few hundred elements */
} fused_bufs;

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* Sets up B for blocks of at most blk elements; false when out of memory. */
static bool bufs_init(const fused_state * fs, int64_t blk, fused_bufs * B) {
    const ew_state * s = &fs->s;
    size_t one = round64((size_t)blk * fs->esz), total = (size_t)fs->f->n_slots * one;
    for (int32_t k = 0; k < s->n_ops; k++)
        if (!s->direct[k]) total += fs->period[k] ? round64((size_t)(fs->period[k] + blk) * fs->esz) : one;
    B->mem = total <= sizeof B->small ? B->small : aligned_alloc(64, total);
    if (!B->mem) return false;
    char * p = B->mem;
    for (int32_t i = 0; i < fs->f->n_slots; i++, p += one) B->slot[i] = p;
    for (int32_t k = 0; k < s->n_ops; k++) {
        if (s->direct[k]) continue;
        B->in[k] = p;
        if (!fs->period[k]) {
            p += one;
            continue;
        }
        int64_t per = fs->period[k], len = per + blk;
        move_block(s, k, p, 0, per, false);
        for (int64_t have = per; have < len;) {   /* repeat it, doubling: `have` stays a multiple of per */
            int64_t n = have < len - have ? have : len - have;
            memcpy(p + have * (int64_t)fs->esz, p, (size_t)n * fs->esz);
            have += n;
        }
        p += round64((size_t)len * fs->esz);
    }
    return true;
}

static void bufs_free(fused_bufs * B) {
    if (B->mem != B->small) free(B->mem);
}

/* Elements [pos, pos + len) of column input k, each row's element repeated along the row:
 * what move_block gathers, without a call per row (x - col, * 2, relu over [1M,4] floats
 * against a [1M,1] column: 12.0 -> 4.8 ms; 3.3 ms with a row or a scalar instead). */
#define FILL_COLUMN(T)                                                                           \
    static void fill_column_##T(const ew_state * s, int32_t k, T * buf, int64_t pos, int64_t len) { \
        int64_t    C = s->sizes[1], row = pos / C, at = pos % C;                                 \
        const T *  src = (const T *)s->base[k];                                                  \
        for (int64_t done = 0; done < len; row++, at = 0) {                                      \
            int64_t run = C - at < len - done ? C - at : len - done;                             \
            T       v   = src[row * s->strides[k][0]];                                           \
            for (int64_t i = 0; i < run; i++) buf[done + i] = v;                                 \
            done += run;                                                                         \
        }                                                                                        \
    }
FILL_COLUMN(float)
FILL_COLUMN(double)

/* Rounds n float32 values to the float16 or bfloat16 value the op would store,
 * and back, in place: what the next op of the chain reads, as eager. */
static void round_to(int32_t dtype, float * x, int64_t n) {
    uint16_t h[512];
    for (int64_t i = 0; i < n; i += 512) {
        int64_t m = n - i < 512 ? n - i : 512;
        tide_convert(h, dtype, 1, x + i, TIDE_DTYPE_F32, 1, m);
        tide_convert(x + i, TIDE_DTYPE_F32, 1, h, dtype, 1, m);
    }
}

/* Runs the steps over elements [pos, pos + len) of the steps' shape. The last step
 * writes dst, or its slot when dst is NULL; returns where the result is. */
static char * eval_block(const fused_state * fs, const fused_bufs * B, int64_t pos, int64_t len, char * dst) {
    const tide_fused * f = fs->f;
    const ew_state *   s = &fs->s;
    const void *       ext[MAX_OPS];
    for (int32_t k = 1; k < s->n_ops; k++) {
        if (s->direct[k]) {
            ext[k] = s->base[k] + pos * (int64_t)fs->esz;
        } else if (fs->period[k]) {
            ext[k] = B->in[k] + (fs->period[k] > 1 ? pos % fs->period[k] : 0) * (int64_t)fs->esz;
        } else if (fs->column[k]) {
            if (fs->esz == 4) fill_column_float(s, k, (float *)B->in[k], pos, len);
            else fill_column_double(s, k, (double *)B->in[k], pos, len);
            ext[k] = B->in[k];
        } else {
            move_block(s, k, B->in[k], pos, len, false);
            ext[k] = B->in[k];
        }
    }
    char * res = NULL;
    for (int32_t i = 0; i < f->n_steps; i++) {
        const tide_fused_step * st = &f->steps[i];
        const void *            in[TIDE_OP_MAX_IN];
        for (int32_t k = 0; k < fs->call[i].n_in; k++)
            in[k] = st->src[k] >= 0 ? ext[1 + st->src[k]] : B->slot[f->steps[-st->src[k] - 1].slot];
        res = i == f->n_steps - 1 && dst ? dst : B->slot[st->slot];
        /* a share of the inputs two blocks on, so that memory streams them in while the
         * steps run: the prefetcher alone leaves the first steps waiting for memory (on
         * 4M floats, one thread: 2.7 ns per element without, 2.25 with) */
        int64_t bytes = len * (int64_t)fs->esz, from = bytes * i / f->n_steps & ~(int64_t)63;
        int64_t to = bytes * (i + 1) / f->n_steps;
        for (int32_t k = 1; k < s->n_ops && pos + 3 * len <= fs->n; k++) {
            if (!s->direct[k]) continue;
            const char * ahead = s->base[k] + (pos + 2 * len) * (int64_t)fs->esz;
            for (int64_t b = from; b < to; b += 64) __builtin_prefetch(ahead + b);
        }
        fs->loop[i](len, pos, res, in, &fs->call[i]);
        if (fs->round) round_to(f->dtype, (float *)res, len);
    }
    return res;
}

/* Takes the next `deal` of `total` work items (elements, rows or tasks) no thread has
 * taken: [*at, *end); false when none are left. The pool's threads call a fused kernel's
 * range function once each and share the work this way rather than by fixed halves,
 * so that a thread the machine holds up leaves its work to the others. */
static bool take(fused_state * fs, int64_t deal, int64_t total, int64_t * at, int64_t * end) {
    *at  = atomic_fetch_add(&fs->next, deal);
    *end = total - *at < deal ? total : *at + deal;
    return *at < total;
}

/* A fused kernel without a reduction, DEAL elements at a time. */
static void run_fused_range(void * ctx, int64_t b, int64_t e) {
    fused_state *    fs = ctx;
    const ew_state * s  = &fs->s;
    fused_bufs       B;
    (void)b, (void)e;
    if (!bufs_init(fs, fs->n < FUSED_BLOCK ? fs->n : FUSED_BLOCK, &B)) {
        atomic_store(&fs->oom, 1);
        return;
    }
    for (int64_t at, end; take(fs, DEAL, fs->n, &at, &end);) {
        for (int64_t pos = at; pos < end; pos += FUSED_BLOCK) {
            int64_t len = end - pos < FUSED_BLOCK ? end - pos : FUSED_BLOCK;
            if (s->direct[0]) {
                eval_block(fs, &B, pos, len, s->base[0] + pos * (int64_t)fs->esz);
            } else {
                eval_block(fs, &B, pos, len, B.in[0]);
                move_block(s, 0, B.in[0], pos, len, true);
            }
        }
    }
    bufs_free(&B);
}

/* The rare case of an input sharing out's memory (an argument that is a view of the
 * tensor updated in place): each step over all elements into a temporary, reading
 * the inputs as memory holds them then, and the updates of out stored as they come. */
static tide_status run_fused_stepwise(fused_state * fs, int64_t n) {
    const tide_fused * f = fs->f;
    const ew_state *   s = &fs->s;
    size_t             bytes = (size_t)n * fs->esz;
    char *             res[TIDE_FUSED_MAX_STEPS] = {0}, * gathered[TIDE_OP_MAX_IN] = {0};
    tide_status        st = TIDE_OK;
    for (int32_t i = 0; i < f->n_steps && st == TIDE_OK; i++) {
        const void * in[TIDE_OP_MAX_IN];
        for (int32_t k = 0; k < fs->call[i].n_in && st == TIDE_OK; k++) {
            int32_t src = f->steps[i].src[k];
            if (src < 0) {
                in[k] = res[-src - 1];
            } else if ((gathered[k] = malloc(bytes))) {
                move_block(s, 1 + src, gathered[k], 0, n, false);
                in[k] = gathered[k];
            } else {
                st = TIDE_E_OOM;
            }
        }
        if (st == TIDE_OK && !(res[i] = malloc(bytes))) st = TIDE_E_OOM;
        if (st == TIDE_OK) fs->loop[i](n, 0, res[i], in, &fs->call[i]);
        if (st == TIDE_OK && fs->round) round_to(f->dtype, (float *)res[i], n);
        if (st == TIDE_OK && f->steps[i].writes_out) move_block(s, 0, res[i], 0, n, true);
        for (int32_t k = 0; k < TIDE_OP_MAX_IN; k++) free(gathered[k]), gathered[k] = NULL;
    }
    bool updates = false;   /* a chain that does not update out in place stores its last result */
    for (int32_t i = 0; i < f->n_steps; i++) updates |= f->steps[i].writes_out != 0;
    if (st == TIDE_OK && !updates) move_block(s, 0, res[f->n_steps - 1], 0, n, true);
    for (int32_t i = 0; i < f->n_steps; i++) free(res[i]);
    return st;
}

/* -- fused sums and means: reduce.c's order, so that they equal eager's ---------------------- */

/* lane[j] += x[i + j] over groups of LANES (n a multiple of LANES), then, for a run's
 * end, the lanes added up in order and the leftover elements after them. */
#define LANE_SUM(SUF, T)                                                                         \
    static TIDE_SIMD_CLONES void lanes_add_##SUF(double * lane, const void * x_, int64_t n) {    \
        const T * restrict x = x_;                                                               \
        double l[LANES];                                                                         \
        memcpy(l, lane, sizeof l);                                                               \
        for (int64_t i = 0; i + LANES <= n; i += LANES)                                          \
            for (int j = 0; j < LANES; j++) l[j] += x[i + j];                                    \
        memcpy(lane, l, sizeof l);                                                               \
    }                                                                                            \
    static double lanes_end_##SUF(const double * lane, const void * tail_, int64_t n) {         \
        const T * tail = tail_;                                                                  \
        double    a = 0;                                                                         \
        for (int j = 0; j < LANES; j++) a += lane[j];                                            \
        for (int64_t i = 0; i < n; i++) a += tail[i];                                            \
        return a;                                                                                \
    }
LANE_SUM(f32, float)
LANE_SUM(f64, double)

/* The sum of a run of n elements of x, continuing lane (zeroed for a new run). */
static double run_sum(const fused_state * fs, double * lane, const char * x, int64_t n, bool end) {
    int64_t full = n / LANES * LANES;
    bool    f32  = fs->ct == TIDE_DTYPE_F32;
    if (f32) lanes_add_f32(lane, x, full); else lanes_add_f64(lane, x, full);
    if (!end) return 0;
    x += full * (int64_t)fs->esz;
    return f32 ? lanes_end_f32(lane, x, n - full) : lanes_end_f64(lane, x, n - full);
}

/* Stores row r's sum (divided by the row length R for a mean) into out. */
static void store_row(const tide_fused * f, tide_tensor * out, int64_t R, int64_t r, double acc) {
    if (f->reduce_op == TIDE_OP_mean) acc /= (double)R;
    char * p = (char *)tide_tensor_ptr(out) +
               tide_elem_offset(out->ndim, out->sizes, out->strides, r) * (int64_t)tide_dtype_size(f->dtype);
    if (f->dtype == TIDE_DTYPE_F32) *(float *)p = (float)acc;
    else *(double *)p = acc;
}

/* Rows of a reduction when a row fits a block (and so a chunk): several rows per block. */
static void run_fused_rows(void * ctx, int64_t b, int64_t e) {
    fused_state * fs   = ctx;
    int64_t       R    = fs->R, rows = fs->n / R, per = FUSED_BLOCK / R;
    int64_t       deal = DEAL / R / per * per;
    fused_bufs    B;
    (void)b, (void)e;
    if (!bufs_init(fs, (rows < per ? rows : per) * R, &B)) {
        atomic_store(&fs->oom, 1);
        return;
    }
    for (int64_t at, end; take(fs, deal > per ? deal : per, rows, &at, &end);) {
        for (int64_t r = at; r < end; r += per) {
            int64_t      cnt = end - r < per ? end - r : per;
            const char * x   = eval_block(fs, &B, r * R, cnt * R, NULL);
            for (int64_t j = 0; j < cnt; j++) {
                double lane[LANES] = {0};
                store_row(fs->f, fs->out, R, r + j, run_sum(fs, lane, x + j * R * (int64_t)fs->esz, R, true));
            }
        }
    }
    bufs_free(&B);
}

/* The (row, chunk) tasks of a reduction whose rows are longer than a block: each chunk's
 * partial sum, from blocks of FUSED_BLOCK (a multiple of LANES) from its start. */
static void run_fused_chunks(void * ctx, int64_t b, int64_t e) {
    fused_state * fs = ctx;
    int64_t       R  = fs->R;
    fused_bufs    B;
    (void)b, (void)e;
    if (!bufs_init(fs, FUSED_BLOCK, &B)) {
        atomic_store(&fs->oom, 1);
        return;
    }
    for (int64_t t, end; take(fs, 1, fs->n / R * fs->nch, &t, &end);) {
        int64_t row = t / fs->nch, c0 = t % fs->nch * TIDE_REDUCE_CHUNK;
        int64_t c1  = R - c0 < TIDE_REDUCE_CHUNK ? R : c0 + TIDE_REDUCE_CHUNK;
        double  lane[LANES] = {0};
        for (int64_t pos = c0; pos < c1; pos += FUSED_BLOCK) {
            int64_t      len = c1 - pos < FUSED_BLOCK ? c1 - pos : FUSED_BLOCK;
            const char * x   = eval_block(fs, &B, row * R + pos, len, NULL);
            double       sum = run_sum(fs, lane, x, len, pos + len == c1);
            if (pos + len == c1) fs->part[t] = sum;
        }
    }
    bufs_free(&B);
}

static tide_status run_fused_reduce(fused_state * fs) {
    const tide_fused * f = fs->f;
    fs->R   = f->reduce_rows && f->ndim > 0 ? f->sizes[f->ndim - 1] : fs->n;
    int64_t rows = fs->n / fs->R;
    if (fs->R <= FUSED_BLOCK) {
        int64_t grain = TIDE_GRAIN / fs->R;
        tide_parallel_for(rows, grain > 0 ? grain : 1, 1, run_fused_rows, fs);
        return TIDE_OK;
    }
    fs->nch  = (fs->R + TIDE_REDUCE_CHUNK - 1) / TIDE_REDUCE_CHUNK;
    fs->part = malloc((size_t)(rows * fs->nch) * sizeof *fs->part);
    if (!fs->part) return TIDE_E_OOM;
    int64_t per = fs->R < TIDE_REDUCE_CHUNK ? fs->R : TIDE_REDUCE_CHUNK;
    tide_parallel_for(rows * fs->nch, per >= TIDE_GRAIN ? 1 : TIDE_GRAIN / per, 1, run_fused_chunks, fs);
    for (int64_t r = 0; r < rows; r++) {   /* chunks combined in order, as reduce.c's finish_range */
        double acc = fs->part[r * fs->nch];
        for (int64_t k = 1; k < fs->nch; k++) acc += fs->part[r * fs->nch + k];
        store_row(f, fs->out, fs->R, r, acc);
    }
    free(fs->part);
    return TIDE_OK;
}

/* A chain over a few elements (a replay of scalars) that updates nothing in
 * place: each step's loop once, its result kept on the stack, with none of the
 * set-up per operand that blocks of large tensors pay for (that set-up was
 * ~100 ns per op of a chain of 1-element adds). false: not such a chain. */
enum { TINY_FUSED = 16 };
static bool run_fused_tiny(const tide_fused * f, tide_tensor * const * ext, tide_tensor * out, int64_t n) {
    if (n > TINY_FUSED || f->reduce_op >= 0 || f->late || f->n_ext > TIDE_OP_MAX_IN || out->dtype_id != f->dtype ||
        f->steps[0].c.compute_dtype != f->dtype || !tide_tensor_is_contiguous(out))
        return false;
    for (int32_t i = 0; i < f->n_steps; i++)
        if (f->steps[i].writes_out) return false;
    size_t       esz = tide_esize(f->dtype);
    const void * ptr[TIDE_OP_MAX_IN];
    _Alignas(64) char rep[TIDE_OP_MAX_IN][TINY_FUSED * 8], res[TIDE_FUSED_MAX_STEPS][TINY_FUSED * 8];
    for (int32_t k = 0; k < f->n_ext; k++) {
        const tide_tensor * t = ext[k];
        if (tide_views_overlap(t, out)) return false;
        if (t->nelem == n && t->dtype_id == f->dtype && tide_tensor_is_contiguous(t)) {
            ptr[k] = tide_tensor_ptr(t);
        } else if (t->nelem == 1) {   /* broadcast (a Lua number, say): converted, repeated */
            tide_convert(rep[k], f->dtype, 1, tide_tensor_ptr(t), t->dtype_id, 1, 1);
            for (int64_t i = 1; i < n; i++) memcpy(rep[k] + i * (int64_t)esz, rep[k], esz);
            ptr[k] = rep[k];
        } else {
            return false;
        }
    }
    for (int32_t i = 0; i < f->n_steps; i++) {
        const tide_fused_step * step = &f->steps[i];
        const tide_opcall *     c    = &step->c;
        tide_ew_loop            loop = step->loop;
        int32_t                 ni   = c->n_in, last = step->src[ni - 1];
        tide_opcall             k_call;
        if (step->k_loop && last >= 0 && ext[last]->nelem == 1) {   /* as binary.c's scalar_last */
            k_call = *c;
            k_call.n_in--;
            tide_convert(k_call.p.scalars, f->dtype, 1, tide_tensor_ptr(ext[last]), ext[last]->dtype_id, 1, 1);
            c = &k_call, loop = step->k_loop, ni--;
        }
        const void * in[TIDE_OP_MAX_IN];
        for (int32_t k = 0; k < ni; k++) in[k] = step->src[k] >= 0 ? ptr[step->src[k]] : res[-step->src[k] - 1];
        loop(n, 0, i == f->n_steps - 1 ? tide_tensor_ptr(out) : res[i], in, c);
    }
    return true;
}

tide_status tide_ew_run_fused(const tide_fused * f, tide_tensor * const * ext, tide_tensor * out) {
    bool    reduce = f->reduce_op >= 0;
    int64_t n      = 1;
    for (int32_t d = 0; d < f->ndim; d++) n *= f->sizes[d];
    if (n == 0) {   /* an empty sum is 0 and an empty mean NaN (0 / 0), per row */
        for (int64_t r = 0; reduce && r < out->nelem; r++) store_row(f, out, 0, r, 0.0);
        return TIDE_OK;
    }
    if (run_fused_tiny(f, ext, out, n)) return TIDE_OK;
    fused_state * fs = calloc(1, sizeof *fs);
    if (!fs) return tide_error_set(TIDE_E_OOM, "fused kernel: out of memory (%d steps over %lld elements)",
                                   f->n_steps, (long long)n);
    ew_state * s = &fs->s;
    fs->f     = f;
    fs->out   = out;
    fs->ct    = f->steps[0].c.compute_dtype;
    fs->round = fs->ct != f->dtype;
    fs->esz   = tide_dtype_size(fs->ct);
    fs->n   = n;
    s->n_ops = 1 + f->n_ext;
    for (int32_t k = 0; k < s->n_ops; k++) {
        const tide_tensor * t = k ? ext[k - 1] : out;
        s->dtype[k] = k || !reduce ? t->dtype_id : fs->ct;
        s->want[k]  = fs->ct;
        if (k == 0 && reduce) {   /* the steps' result is never stored: a contiguous stand-in */
            int64_t st = 1;
            for (int32_t d = f->ndim - 1; d >= 0; d--) s->strides[0][d] = st, st *= f->sizes[d];
            continue;
        }
        aligned_strides(t, f->ndim, s->strides[k]);
        s->base[k] = (char *)tide_tensor_ptr(t);
    }
    coalesce(s, f->ndim, f->sizes);
    bool stepwise = false;
    for (int32_t k = 0; k < s->n_ops; k++) {
        s->direct[k] = contiguous(s, k) && s->dtype[k] == s->want[k];
        const tide_tensor * t = k ? ext[k - 1] : out;
        if (k && !reduce && tide_views_overlap(t, out) && (!tide_same_view(t, out) || (f->late >> (k - 1) & 1)))
            stepwise = true;   /* reads what the blocks would write, at other indices or after an update */
        if (!k || s->direct[k]) continue;
        int32_t p = 0;   /* broadcast over the leading dims: a pattern of the trailing ones repeats */
        while (p < s->nd && s->strides[k][p] == 0) p++;
        int64_t per = 1;
        for (int32_t d = p; d < s->nd; d++) per *= s->sizes[d];
        if (p > 0 && per <= PATTERN_MAX) fs->period[k] = per;
        fs->column[k] = !fs->period[k] && s->nd == 2 && s->strides[k][1] == 0 && s->dtype[k] == s->want[k];
    }
    tide_status st = TIDE_OK;
    for (int32_t i = 0; i < f->n_steps; i++) {
        const tide_fused_step * step = &f->steps[i];
        int32_t                 last = step->src[step->c.n_in - 1];
        fs->call[i] = step->c;
        fs->loop[i] = step->loop;
        if (step->k_loop && last >= 0 && ext[last]->nelem == 1 && !stepwise) {   /* as binary.c's scalar_last */
            fs->call[i].n_in--;
            tide_convert(fs->call[i].p.scalars, fs->ct, 1, tide_tensor_ptr(ext[last]), ext[last]->dtype_id, 1, 1);
            fs->loop[i] = step->k_loop;
        }
    }
    if (reduce) st = run_fused_reduce(fs);
    else if (stepwise) st = run_fused_stepwise(fs, n);
    else tide_parallel_for(n, TIDE_GRAIN, FUSED_BLOCK, run_fused_range, fs);
    if (atomic_load(&fs->oom)) st = TIDE_E_OOM;
    free(fs);
    return st == TIDE_OK ? TIDE_OK : tide_error_set(st, "fused kernel: out of memory (%d steps over %lld elements)",
                                                    f->n_steps, (long long)n);
}
