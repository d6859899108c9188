/*
 * pass_fuse.c - elementwise fusion on a captured graph: a run of consecutive
 * elementwise ops of one float dtype over one output shape, each but the last
 * read only inside the run, becomes one node whose kernel applies every op's
 * loop block by block (ops/cpu/ew.c), so the chain reads its inputs and writes
 * its result once instead of once per op. Random ops, in-place ops and ops
 * whose loops are not exported (tide_loops_<op>) stay as they are.
 */
#include "pass.h"
#include "../ops/cpu/kernels.h"

#include <stdlib.h>

#define X(name, nin, nout, dt, acc, sh, fl, par) \
    extern const tide_ew_loop tide_loops_##name[TIDE_DTYPE_COUNT] __attribute__((weak));
#include "../ops/ops.def"
#undef X

static const tide_ew_loop * const loops_of[] = {
#define X(name, nin, nout, dt, acc, sh, fl, par) tide_loops_##name,
#include "../ops/ops.def"
#undef X
};

static bool same_shape(const tide_gvalue * a, const tide_gvalue * b) {
    return a->ndim == b->ndim && a->dtype == b->dtype && !memcmp(a->sizes, b->sizes, (size_t)a->ndim * 8);
}

/* A node a fused kernel can run as one of its steps. */
static bool fusable(const tide_graph * g, const tide_gnode * n) {
    if (n->kind != TIDE_GN_OP || n->into >= 0 || n->n_out != 1 || n->n_in > TIDE_OP_MAX_IN) return false;
    tide_op_info info;
    if (tide_op_get_info(n->op, &info) != TIDE_OK || !(info.flags & TIDE_OPF_ELEMWISE) || (info.flags & TIDE_OPF_RANDOM))
        return false;
    const tide_gvalue * out = &g->values[n->out[0]];
    return loops_of[n->op] && loops_of[n->op][n->compute_dtype] && out->dtype == n->compute_dtype &&
           (out->dtype == TIDE_DTYPE_F32 || out->dtype == TIDE_DTYPE_F64) && out->dev.type == TIDE_DEVICE_CPU;
}

/* How many times each value is read: by nodes, as an output, as a written destination. */
static int32_t * count_uses(const tide_graph * g) {
    int32_t * uses = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *uses);
    if (!uses) return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_in; k++) uses[n->in[k]]++;
        if (n->into >= 0) uses[n->into] += 1000;   /* written in place: never an intermediate */
    }
    for (int32_t i = 0; i < g->n_outputs; i++) uses[g->outputs[i]] += 1000;
    return uses;
}

/* Builds the fused program of nodes [first, last]; fails when it needs too many inputs. */
static tide_fused * program(const tide_graph * g, int32_t first, int32_t last, int32_t * ext, int32_t * n_ext) {
    tide_fused * f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->n_steps = last - first + 1;
    f->dtype   = g->nodes[last].compute_dtype;
    *n_ext     = 0;
    for (int32_t i = first; i <= last; i++) {
        const tide_gnode * n  = &g->nodes[i];
        tide_fused_step *  st = &f->steps[i - first];
        st->c.op            = n->op;
        st->c.n_in          = n->n_in;
        st->c.n_out         = 1;
        st->c.compute_dtype = n->compute_dtype;
        st->c.p             = n->p;
        st->loop            = loops_of[n->op][n->compute_dtype];
        for (int32_t k = 0; k < n->n_in; k++) {
            int32_t v = n->in[k], from = -1;
            for (int32_t j = first; j < i && from < 0; j++)
                if (g->nodes[j].out[0] == v) from = j - first;
            if (from >= 0) {
                st->src[k] = -from - 1;
                continue;
            }
            int32_t e = 0;
            while (e < *n_ext && ext[e] != v) e++;
            if (e == *n_ext) {
                if (e == TIDE_OP_MAX_IN) {
                    free(f);
                    return NULL;
                }
                ext[(*n_ext)++] = v;
            }
            st->src[k] = e;
        }
    }
    f->n_ext = *n_ext;
    return f;
}

int32_t tide_pass_fuse(tide_graph * g) {
    int32_t * uses = count_uses(g);
    bool *    keep = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *keep);
    if (!uses || !keep) {
        free(uses), free(keep);
        return -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) keep[i] = true;
    int32_t fused = 0;
    for (int32_t first = 0; first < g->n_nodes;) {
        if (!fusable(g, &g->nodes[first])) {
            first++;
            continue;
        }
        /* extend while the next node is fusable, of the same shape, and reads the
         * previous one's result, which nothing outside the run reads */
        const tide_gvalue * shape = &g->values[g->nodes[first].out[0]];
        int32_t last = first;
        while (last + 1 < g->n_nodes && last - first + 1 < TIDE_FUSED_MAX_STEPS) {
            const tide_gnode * next = &g->nodes[last + 1];
            int32_t prev_out = g->nodes[last].out[0];
            if (!fusable(g, next) || !same_shape(&g->values[next->out[0]], shape)) break;
            int32_t reads = 0;
            for (int32_t k = 0; k < next->n_in; k++) reads += next->in[k] == prev_out;
            if (!reads || uses[prev_out] != reads) break;   /* read elsewhere too: it must exist */
            bool inputs_ok = true;   /* earlier results of the run may be read only once, by the next node */
            for (int32_t k = 0; k < next->n_in && inputs_ok; k++)
                for (int32_t j = first; j < last; j++) inputs_ok = inputs_ok && next->in[k] != g->nodes[j].out[0];
            if (!inputs_ok) break;
            last++;
        }
        if (last > first) {
            int32_t      ext[TIDE_OP_MAX_IN], n_ext = 0;
            tide_fused * f = program(g, first, last, ext, &n_ext);
            if (f) {
                tide_gnode * n = &g->nodes[last];   /* the run's last node becomes the fused one */
                n->kind  = TIDE_GN_FUSED;
                n->op    = -1;
                n->fused = f;
                n->n_in  = n_ext;
                memcpy(n->in, ext, (size_t)n_ext * sizeof *ext);
                for (int32_t i = first; i < last; i++) keep[i] = false;
                fused += last - first;
            }
        }
        first = last + 1;
    }
    if (fused) tide_graph_compact(g, keep);
    free(uses), free(keep);
    return fused;
}
