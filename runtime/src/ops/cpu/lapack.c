/*
 * lapack.c - the matrix decompositions and solvers of the registry
 * (linalg_solve, linalg_solve_triangular, linalg_slogdet, linalg_cholesky,
 * linalg_eigh, linalg_qr, linalg_svd): their shape rules, the message of a
 * factorisation that fails (shared with the CUDA backend's reports), and the
 * CPU kernels, which hand each matrix of a batch to OpenBLAS's LAPACK.
 *
 * LAPACK is column-major: each matrix is copied, converted to the compute
 * dtype, into a column-major work buffer (any strides and storage dtype in),
 * factored there, and the results are written back through the outputs'
 * strides. The copies are O(n^2) against the factorisations' O(n^3). The
 * matrices of a batch run in parallel on Tide's pool, each call single-
 * threaded; a lone large matrix runs on OpenBLAS's threads, with the cores
 * the pool lends, as a lone large product does. OpenBLAS is loaded at run
 * time (blas.c): without it (TIDE_BLAS=builtin) these ops are an error.
 */
#include "blas.h"
#include "kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* -- the message of a failed factorisation --------------------------------------------------- */

tide_status tide_linalg_error(const char * op, int64_t info, int64_t batch, int64_t nbatch, int32_t cuda_dev) {
    char what[160], where[96] = "", dev[32] = "";
    if (strcmp(op, "linalg_cholesky") == 0)
        snprintf(what, sizeof what, "the matrix is not positive-definite: its leading minor of order %lld is not",
                 (long long)info);
    else if (strcmp(op, "linalg_solve") == 0)
        snprintf(what, sizeof what, "the matrix is singular: pivot %lld of its LU factorisation is zero", (long long)info);
    else
        snprintf(what, sizeof what, "the algorithm did not converge (LAPACK info %lld)", (long long)info);
    if (nbatch > 0) snprintf(where, sizeof where, " (batch element %lld of %lld)", (long long)batch + 1, (long long)nbatch);
    if (cuda_dev >= 0) snprintf(dev, sizeof dev, " (on cuda:%d)", cuda_dev);
    return tide_error_set(TIDE_E_VALUE, "%s: %s%s%s", op, what, where, dev);
}

/* -- shape rules ----------------------------------------------------------------------------- */

static tide_status need_matrix(const tide_opcall * c, int32_t i, const char * what, bool square) {
    const tide_tensor * t = c->in[i];
    char s[128];
    if (t->ndim < 2)
        return tide_error_set(TIDE_E_SHAPE, "%s: %s must have at least 2 dimensions (a matrix or a batch of them), got shape %s",
                              tide_op_name(c->op), what, tide_shape_str(t, s, sizeof s));
    if (square && t->sizes[t->ndim - 1] != t->sizes[t->ndim - 2])
        return tide_error_set(TIDE_E_SHAPE, "%s: %s must be square matrices, got shape %s", tide_op_name(c->op), what,
                              tide_shape_str(t, s, sizeof s));
    return TIDE_OK;
}

/* Output o: the batch dims nb of bsizes, then `tail` sizes. */
static void set_out(tide_shape_out * o, int32_t k, int32_t nb, const int64_t * bsizes, int32_t ntail, int64_t t0, int64_t t1) {
    memcpy(o->sizes[k], bsizes, (size_t)nb * sizeof(int64_t));
    if (ntail > 0) o->sizes[k][nb] = t0;
    if (ntail > 1) o->sizes[k][nb + 1] = t1;
    o->ndim[k] = nb + ntail;
}

static void set_empty(tide_shape_out * o, int32_t k) {
    o->ndim[k]     = 1;
    o->sizes[k][0] = 0;
}

static bool flag_param(tide_opcall * c, int32_t i) { return c->p.n_ints > i && c->p.ints[i] != 0; }

/* linalg_solve, linalg_solve_triangular: A [..., n, n], B [..., n, k], batch dims broadcast. */
tide_status tide_shape_linalg_solve(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    TIDE_CHECK(need_matrix(c, 1, "B", false));
    const tide_tensor * a = c->in[0], * b = c->in[1];
    const char * op = tide_op_name(c->op);
    char x[128], y[128];
    int64_t n = a->sizes[a->ndim - 1];
    if (b->sizes[b->ndim - 2] != n)
        return tide_error_set(TIDE_E_SHAPE, "%s: A of shape %s is %lldx%lld, so B must have %lld rows, got shape %s", op,
                              tide_shape_str(a, x, sizeof x), (long long)n, (long long)n, (long long)n,
                              tide_shape_str(b, y, sizeof y));
    int32_t na = a->ndim - 2, nb = b->ndim - 2, nd = na > nb ? na : nb;
    int64_t bs[TIDE_MAX_DIMS];
    for (int32_t d = 0; d < nd; d++) {
        int32_t ja = d - (nd - na), jb = d - (nd - nb);
        int64_t sa = ja >= 0 ? a->sizes[ja] : 1, sb = jb >= 0 ? b->sizes[jb] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return tide_error_set(TIDE_E_SHAPE, "%s: the batch dimensions of shapes %s and %s cannot be broadcast: %lld ~= %lld",
                                  op, tide_shape_str(a, x, sizeof x), tide_shape_str(b, y, sizeof y), (long long)sa,
                                  (long long)sb);
        bs[d] = sa == 1 ? sb : sa;
    }
    if (c->op == TIDE_OP_linalg_solve_triangular) {
        int64_t upper = flag_param(c, 0), unit = flag_param(c, 1);
        c->p.ints[0] = upper, c->p.ints[1] = unit, c->p.n_ints = 2;
    } else {
        c->p.n_ints = 0;
    }
    set_out(o, 0, nd, bs, 2, n, b->sizes[b->ndim - 1]);
    return TIDE_OK;
}

/* linalg_cholesky: A's shape; ints[0] upper (0/1). */
tide_status tide_shape_linalg_square(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    c->p.ints[0] = flag_param(c, 0), c->p.n_ints = 1;
    o->ndim[0] = c->in[0]->ndim;
    memcpy(o->sizes[0], c->in[0]->sizes, (size_t)c->in[0]->ndim * sizeof(int64_t));
    return TIDE_OK;
}

/* linalg_slogdet: sign and log|det|, each of A's batch shape. */
tide_status tide_shape_linalg_slogdet(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    c->p.n_ints = 0;
    set_out(o, 0, c->in[0]->ndim - 2, c->in[0]->sizes, 0, 0, 0);
    set_out(o, 1, c->in[0]->ndim - 2, c->in[0]->sizes, 0, 0, 0);
    return TIDE_OK;
}

/* linalg_eigh: eigenvalues [..., n], eigenvectors [..., n, n]; ints[0] upper. */
tide_status tide_shape_linalg_eigh(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    const tide_tensor * a = c->in[0];
    int64_t n = a->sizes[a->ndim - 1];
    c->p.ints[0] = flag_param(c, 0), c->p.n_ints = 1;
    set_out(o, 0, a->ndim - 2, a->sizes, 1, n, 0);
    set_out(o, 1, a->ndim - 2, a->sizes, 2, n, n);
    return TIDE_OK;
}

/* linalg_qr: ints[0] the mode, 0 reduced, 1 complete, 2 r. */
tide_status tide_shape_linalg_qr(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", false));
    const tide_tensor * a = c->in[0];
    int64_t mode = c->p.n_ints > 0 ? c->p.ints[0] : 0;
    if (mode < 0 || mode > 2)
        return tide_error_set(TIDE_E_VALUE, "%s: mode must be 0 (reduced), 1 (complete) or 2 (r), got %lld",
                              tide_op_name(c->op), (long long)mode);
    c->p.ints[0] = mode, c->p.n_ints = 1;
    int32_t nb = a->ndim - 2;
    int64_t m = a->sizes[nb], n = a->sizes[nb + 1], k = m < n ? m : n;
    if (mode == 2) set_empty(o, 0);
    else set_out(o, 0, nb, a->sizes, 2, m, mode == 1 ? m : k);
    set_out(o, 1, nb, a->sizes, 2, mode == 1 ? m : k, n);
    return TIDE_OK;
}

/* linalg_svd: ints[0] full_matrices, ints[1] compute_uv (default 1). */
tide_status tide_shape_linalg_svd(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", false));
    const tide_tensor * a = c->in[0];
    bool full = flag_param(c, 0), uv = c->p.n_ints < 2 || c->p.ints[1] != 0;
    c->p.ints[0] = full, c->p.ints[1] = uv, c->p.n_ints = 2;
    int32_t nb = a->ndim - 2;
    int64_t m = a->sizes[nb], n = a->sizes[nb + 1], k = m < n ? m : n;
    set_out(o, 1, nb, a->sizes, 1, k, 0);
    if (!uv) {
        set_empty(o, 0);
        set_empty(o, 2);
    } else {
        set_out(o, 0, nb, a->sizes, 2, m, full ? m : k);
        set_out(o, 2, nb, a->sizes, 2, full ? n : k, n);
    }
    return TIDE_OK;
}
