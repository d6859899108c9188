/*
 * blas.cu - matmul, mm, bmm, dot and outer on CUDA, each seen as linalg.c sees
 * it: a batch of row-major products C[m,n] = A[m,k] B[k,n] with broadcast batch
 * strides, whose results these match. Float products go to cuBLAS (a handle
 * per device), integer ones to a tiled kernel that wraps like the CPU's, a
 * lone dot product and outer products to small kernels. Shape rules are libtide's.
 */
#include "common.cuh"

#include <cublas_v2.h>

#include <mutex>
#include <stdint.h>
#include <stdio.h>

namespace tide_cuda {
namespace {

/* -- the batched product -------------------------------------------------------------------- */

/* One operand as a batch of rows x cols matrices (linalg.c's operand):
 * element (i, j) of batch index (b_0..b_nb-1) is at data + sum b_d*bstr[d] +
 * i*rs + j*cs, in elements of dtype. A stride over a size-1 dim is 0. */
struct Mat {
    void *  data;
    int32_t dtype;
    int64_t rows, cols, rs, cs;
    int64_t bstr[TIDE_MAX_DIMS];
};

/* A call as nbatch products over the result's nb leading (batch) dims. */
struct Problem {
    int32_t nb;
    int64_t bsizes[TIDE_MAX_DIMS];
    int64_t nbatch, m, n, k;
    Mat     a, b, out;
};

/* t as a Mat; its t_nb leading dims are the last t_nb of the problem's nb batch dims. */
Mat mat(const tide_devtensor & t, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int32_t nb, int32_t t_nb) {
    Mat x;
    x.data  = t.data;
    x.dtype = t.dtype;
    x.rows  = rows;
    x.cols  = cols;
    x.rs    = rows == 1 ? 0 : rs;
    x.cs    = cols == 1 ? 0 : cs;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) x.bstr[d] = 0;
    for (int32_t d = 0; d < nb; d++) {
        int32_t j = d - (nb - t_nb);
        if (j >= 0 && t.sizes[j] != 1) x.bstr[d] = t.strides[j];
    }
    return x;
}

/* matmul, mm, bmm and dot (the latter three are matmul with stricter shape
 * rules): NumPy's matmul, a 1-d operand a row (left) or a column (right). */
Problem matmul_problem(const tide_devcall * c) {
    const tide_devtensor & a = c->in[0], & b = c->in[1], & o = c->out[0];
    Problem p;
    int32_t na = a.ndim > 2 ? a.ndim - 2 : 0, nbb = b.ndim > 2 ? b.ndim - 2 : 0;
    p.nb     = na > nbb ? na : nbb;
    p.nbatch = 1;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) p.bsizes[d] = 1;
    for (int32_t d = 0; d < p.nb; d++) {   /* the result's leading dims are the batch */
        p.bsizes[d] = o.sizes[d];
        p.nbatch *= o.sizes[d];
    }
    p.k = a.sizes[a.ndim - 1];
    if (a.ndim == 1) {
        p.m = 1;
        p.a = mat(a, 1, p.k, 0, a.strides[0], p.nb, 0);
    } else {
        p.m = a.sizes[a.ndim - 2];
        p.a = mat(a, p.m, p.k, a.strides[a.ndim - 2], a.strides[a.ndim - 1], p.nb, na);
    }
    if (b.ndim == 1) {
        p.n = 1;
        p.b = mat(b, p.k, 1, b.strides[0], 0, p.nb, 0);
    } else {
        p.n = b.sizes[b.ndim - 1];
        p.b = mat(b, p.k, p.n, b.strides[b.ndim - 2], b.strides[b.ndim - 1], p.nb, nbb);
    }
    /* the result: the batch dims, then m unless a is 1-d, then n unless b is */
    int32_t d  = p.nb;
    int64_t rs = a.ndim > 1 ? o.strides[d++] : 0, cs = b.ndim > 1 ? o.strides[d] : 0;
    p.out      = mat(o, p.m, p.n, rs, cs, p.nb, p.nb);
    return p;
}

/* outer(a, b): a as a column times b as a row, k = 1. */
Problem outer_problem(const tide_devcall * c) {
    const tide_devtensor & a = c->in[0], & b = c->in[1], & o = c->out[0];
    Problem p;
    p.nb     = 0;
    p.nbatch = 1;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) p.bsizes[d] = 1;
    p.m   = a.sizes[0];
    p.n   = b.sizes[0];
    p.k   = 1;
    p.a   = mat(a, p.m, 1, a.strides[0], 0, 0, 0);
    p.b   = mat(b, 1, p.n, 0, b.strides[0], 0, 0);
    p.out = mat(o, p.m, p.n, o.strides[0], o.strides[1], 0, 0);
    return p;
}

/* Whether cuBLAS can read x's matrices in place: one stride 1 and the other
 * at least the stored row (or column) length. trans: stored column-major;
 * ld: the stride between stored rows (or columns). */
bool blas_layout(const Mat & x, bool & trans, int64_t & ld) {
    if ((x.cs == 1 || x.cols == 1) && (x.rows == 1 || x.rs >= x.cols)) {
        trans = false;
        ld    = x.rows == 1 ? x.cols : x.rs;
        return true;
    }
    if ((x.rs == 1 || x.rows == 1) && (x.cols == 1 || x.cs >= x.rows)) {
        trans = true;
        ld    = x.cols == 1 ? x.rows : x.cs;
        return true;
    }
    return false;
}

char * dims_str(const tide_devtensor & t, char * buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < t.ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)t.sizes[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

void * scratch(const tide_devcall * c, size_t nbytes) { return c->scratch(c->scratch_ctx, nbytes); }

/* The accumulator of a compute type: integers wrap, so they add and multiply
 * unsigned (signed overflow is undefined); uint8 sums in 32 bits, which wraps
 * to the same low byte. */
template <typename T> struct Acc { using type = T; };
template <> struct Acc<int32_t> { using type = uint32_t; };
template <> struct Acc<int64_t> { using type = uint64_t; };
template <> struct Acc<uint8_t> { using type = uint32_t; };

/* The operands of a kernel over one iteration shape, passed by value. */
struct Pair {
    Operand o[2];
};
struct Triple {
    Operand o[3];
};

/* -- conversions ---------------------------------------------------------------------------- */

/* dst[i] = src[i] over s, converted through T (src NULL: zeros). */
template <typename T, typename I> __global__ void __launch_bounds__(THREADS) copy_kernel(Shape s, Pair p) {
    for (uint64_t i = blockIdx.x * (uint64_t)THREADS + threadIdx.x; i < (uint64_t)s.nelem;
         i += (uint64_t)gridDim.x * THREADS) {
        int64_t off[2];
        offsets<2, I>(s, p.o, (I)i, off);
        T v = p.o[0].data ? load_as<T>(p.o[0].data, p.o[0].dtype, off[0]) : (T)0;
        store_as<T>((void *)p.o[1].data, p.o[1].dtype, off[1], v);
    }
}

/* Launches copy_kernel; through double only where one side is float64, so
 * that int64 to float32 rounds once, as the CPU's conversion does. */
void copy(const tide_devcall * c, Shape s, Operand * ops) {
    coalesce(s, ops, 2);
    Pair p;
    p.o[0] = ops[0];
    p.o[1] = ops[1];
    cudaStream_t stream = (cudaStream_t)c->stream;
    unsigned     blocks = blocks_for(s.nelem);
    bool         wide   = ops[1].dtype == TIDE_DTYPE_F64 || (ops[0].data && ops[0].dtype == TIDE_DTYPE_F64);
    bool         small  = s.nelem <= (int64_t)UINT32_MAX;
    if (wide && small) copy_kernel<double, uint32_t><<<blocks, THREADS, 0, stream>>>(s, p);
    else if (wide) copy_kernel<double, uint64_t><<<blocks, THREADS, 0, stream>>>(s, p);
    else if (small) copy_kernel<float, uint32_t><<<blocks, THREADS, 0, stream>>>(s, p);
    else copy_kernel<float, uint64_t><<<blocks, THREADS, 0, stream>>>(s, p);
}

/* Replaces x by a contiguous row-major copy in dtype dt, on scratch memory.
 * Batch dims that x broadcasts stay broadcast: they are copied once. */
int gather(const tide_devcall * c, const Problem & p, Mat & x, int32_t dt) {
    Shape   s      = {};
    Operand ops[2] = {};
    s.nelem        = x.rows * x.cols;
    for (int32_t d = 0; d < p.nb; d++) {
        if (!x.bstr[d]) continue;
        s.sizes[s.ndim]        = p.bsizes[d];
        ops[0].strides[s.ndim] = x.bstr[d];
        s.ndim++;
        s.nelem *= p.bsizes[d];
    }
    s.sizes[s.ndim]          = x.rows;
    ops[0].strides[s.ndim++] = x.rs;
    s.sizes[s.ndim]          = x.cols;
    ops[0].strides[s.ndim++] = x.cs;
    void * buf = scratch(c, (size_t)s.nelem * (size_t)esize(dt));
    if (!buf) return TIDE_DEVAPI_OOM;
    ops[0].data  = x.data;
    ops[0].dtype = x.dtype;
    ops[1].data  = buf;
    ops[1].dtype = dt;
    int64_t step = 1;
    for (int32_t d = s.ndim - 1; d >= 0; d--) {
        ops[1].strides[d] = step;
        step *= s.sizes[d];
    }
    copy(c, s, ops);
    step = x.rows * x.cols;
    for (int32_t d = p.nb - 1; d >= 0; d--) {
        if (!x.bstr[d]) continue;
        x.bstr[d] = step;
        step *= p.bsizes[d];
    }
    x.data  = buf;
    x.dtype = dt;
    x.rs    = x.rows == 1 ? 0 : x.cols;
    x.cs    = x.cols == 1 ? 0 : 1;
    return TIDE_DEVAPI_OK;
}

/* Writes a contiguous result (dtype dt, row-major over out's shape; NULL:
 * zeros) into c's output, whatever its dtype and strides. */
void write_out(const tide_devcall * c, const void * src, int32_t dt) {
    const tide_devtensor & o      = c->out[0];
    Shape                  s      = {};
    Operand                ops[2] = {};
    s.ndim                        = o.ndim;
    s.nelem                       = o.nelem;
    int64_t step                  = 1;
    for (int32_t d = o.ndim - 1; d >= 0; d--) {
        s.sizes[d]        = o.sizes[d];
        ops[0].strides[d] = step;
        ops[1].strides[d] = o.strides[d];
        step *= o.sizes[d];
    }
    ops[0].data  = src;
    ops[0].dtype = dt;
    ops[1].data  = o.data;
    ops[1].dtype = o.dtype;
    copy(c, s, ops);
}

/* -- floats: cuBLAS -------------------------------------------------------------------------- */

/* One cuBLAS handle per device, made on first use and kept for the process:
 * destroying it at exit could run after the CUDA runtime is gone. The engine
 * calls a device's kernels from one thread; the lock still keeps one caller's
 * stream and math mode, which every call sets, from changing under another.
 * The handle's own workspace is safe because a device has one stream. */
enum { MAX_DEVICES = 64 };
struct Handle {
    std::mutex     mu;
    cublasHandle_t h = nullptr;
};
Handle handles[MAX_DEVICES];

int blas_fail(const tide_devcall * c, const char * fn, cublasStatus_t st) {
    char a[128], b[128];
    return set_error(st == CUBLAS_STATUS_ALLOC_FAILED ? TIDE_DEVAPI_OOM : TIDE_DEVAPI_ERROR,
                     "%s of shapes %s and %s: %s failed: %s (%s)", c->op, dims_str(c->in[0], a, sizeof a),
                     dims_str(c->in[1], b, sizeof b), fn, cublasGetStatusString(st), cublasGetStatusName(st));
}

cudaDataType cuda_type(int32_t dt) {
    switch (dt) {
    case TIDE_DTYPE_F64:  return CUDA_R_64F;
    case TIDE_DTYPE_F16:  return CUDA_R_16F;
    case TIDE_DTYPE_BF16: return CUDA_R_16BF;
    default:              return CUDA_R_32F;
    }
}

/* The pointers of each batch's matrices, for cublasGemmBatchedEx when the
 * batch strides are not one stride per operand: a's, then b's, then c's. */
__global__ void __launch_bounds__(THREADS) batch_pointers(Shape s, Triple t, int32_t esa, int32_t esb, int32_t esc,
                                                          void ** ptrs) {
    for (uint64_t i = blockIdx.x * (uint64_t)THREADS + threadIdx.x; i < (uint64_t)s.nelem;
         i += (uint64_t)gridDim.x * THREADS) {
        int64_t off[3];
        offsets<3, uint64_t>(s, t.o, i, off);
        ptrs[i]               = (char *)t.o[0].data + off[0] * esa;
        ptrs[s.nelem + i]     = (char *)t.o[1].data + off[1] * esb;
        ptrs[2 * s.nelem + i] = (char *)t.o[2].data + off[2] * esc;
    }
}

/* Float products. cuBLAS is column-major: the row-major C = A B is the
 * column-major C^T = B^T A^T, so B goes first and the sides swap (m <-> n).
 * A row-major operand read column-major is already its transpose (op N); a
 * column-major one (a transposed view) takes op T. The _64 entry points take
 * sizes and leading dimensions beyond int range. */
int gemm(const tide_devcall * c, Problem & p) {
    int32_t ct = c->compute_dtype;
    /* float16 @ float16 (or bfloat16): cuBLAS reads them as they are and
     * accumulates in float32 (the CPU converts them to float32 first: the
     * same products, summed in another order) */
    bool    half = ct == TIDE_DTYPE_F32 && p.a.dtype == p.b.dtype &&
                   (p.a.dtype == TIDE_DTYPE_F16 || p.a.dtype == TIDE_DTYPE_BF16);
    int32_t it   = half ? p.a.dtype : ct;                 /* cuBLAS's input dtype */
    int32_t ot   = half && p.out.dtype == it ? it : ct;   /* and its output's */
    if (p.k == 0) {   /* an empty sum, left to no library's reading of beta = 0 */
        write_out(c, nullptr, ct);
        return launched(c);
    }

    bool    ta = false, tb = false, tc = false;
    int64_t lda = 1, ldb = 1, ldc = 1;
    if (p.a.dtype != it || !blas_layout(p.a, ta, lda)) {
        if (int rc = gather(c, p, p.a, it)) return rc;
        blas_layout(p.a, ta, lda);
    }
    if (p.b.dtype != it || !blas_layout(p.b, tb, ldb)) {
        if (int rc = gather(c, p, p.b, it)) return rc;
        blas_layout(p.b, tb, ldb);
    }
    /* The output in place when cuBLAS can write it: row-major matrices, and
     * no batch dim that the destination broadcasts (stride 0) or walks
     * backwards; else a contiguous scratch result, converted into it after. */
    Mat  o      = p.out;
    bool direct = o.dtype == ot && blas_layout(o, tc, ldc) && !tc;
    for (int32_t d = 0; d < p.nb; d++) direct = direct && (p.bsizes[d] == 1 || o.bstr[d] > 0);
    if (!direct) {
        o.data = scratch(c, (size_t)c->out[0].nelem * (size_t)esize(ot));
        if (!o.data) return TIDE_DEVAPI_OOM;
        o.dtype      = ot;
        o.rs         = o.rows == 1 ? 0 : o.cols;
        o.cs         = o.cols == 1 ? 0 : 1;
        ldc          = o.cols;
        int64_t step = o.rows * o.cols;
        for (int32_t d = p.nb - 1; d >= 0; d--) {
            o.bstr[d] = p.bsizes[d] == 1 ? 0 : step;
            step *= p.bsizes[d];
        }
    }

    /* One stride per operand over the batch (after merging dims) makes one
     * strided-batched call; anything else (a broadcast inside the batch, say)
     * goes through a pointer per matrix, which the device computes. */
    Shape   bs     = {};
    Operand ops[3] = {};
    bs.ndim        = p.nb;
    bs.nelem       = p.nbatch;
    const Mat * ms[3] = {&p.a, &p.b, &o};
    for (int32_t d = 0; d < p.nb; d++) bs.sizes[d] = p.bsizes[d];
    for (int32_t i = 0; i < 3; i++) {
        ops[i].data  = ms[i]->data;
        ops[i].dtype = ms[i]->dtype;
        for (int32_t d = 0; d < p.nb; d++) ops[i].strides[d] = ms[i]->bstr[d];
    }
    coalesce(bs, ops, 3);
    bool    strided = bs.ndim <= 1 && ops[0].strides[0] >= 0 && ops[1].strides[0] >= 0 && ops[2].strides[0] >= 0;
    void ** ptrs    = nullptr;
    if (!strided) {
        ptrs = (void **)scratch(c, 3 * (size_t)p.nbatch * sizeof(void *));
        if (!ptrs) return TIDE_DEVAPI_OOM;
        Triple t = {{ops[0], ops[1], ops[2]}};
        batch_pointers<<<blocks_for(p.nbatch), THREADS, 0, (cudaStream_t)c->stream>>>(bs, t, esize(it), esize(it),
                                                                                        esize(ot), ptrs);
        if (int rc = launched(c)) return rc;
    }

    /* TF32 only where the caller allows it (tide.cuda.allow_tf32); half
     * inputs keep split-K partial sums in float32 rather than the output
     * type, as the CPU's float32 sums are */
    bool                tf32 = it == TIDE_DTYPE_F32 && (c->flags & TIDE_DEVCALL_ALLOW_TF32);
    cublasComputeType_t comp = it == TIDE_DTYPE_F64 ? CUBLAS_COMPUTE_64F
                               : tf32               ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                    : CUBLAS_COMPUTE_32F;
    int math = tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if (half) math |= CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    float        alpha_f = 1, beta_f = 0;
    double       alpha_d = 1, beta_d = 0;
    const void * alpha   = it == TIDE_DTYPE_F64 ? (const void *)&alpha_d : (const void *)&alpha_f;
    const void * beta    = it == TIDE_DTYPE_F64 ? (const void *)&beta_d : (const void *)&beta_f;
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType      dti = cuda_type(it), dto = cuda_type(ot);

    {
        BlasHandle bh;
        if (int rc = blas_handle(c, math, bh)) return rc;
        cublasStatus_t st;
        if (strided && bs.ndim == 0) {
            st = cublasGemmEx_64(bh.h, opb, opa, p.n, p.m, p.k, alpha, p.b.data, dti, ldb, p.a.data, dti, lda, beta,
                                 o.data, dto, ldc, comp, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(c, "cublasGemmEx_64", st);
        } else if (strided) {
            st = cublasGemmStridedBatchedEx_64(bh.h, opb, opa, p.n, p.m, p.k, alpha, p.b.data, dti, ldb,
                                               ops[1].strides[0], p.a.data, dti, lda, ops[0].strides[0], beta, o.data,
                                               dto, ldc, ops[2].strides[0], bs.sizes[0], comp, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(c, "cublasGemmStridedBatchedEx_64", st);
        } else {
            st = cublasGemmBatchedEx_64(bh.h, opb, opa, p.n, p.m, p.k, alpha, ptrs + p.nbatch, dti, ldb, ptrs, dti, lda,
                                        beta, ptrs + 2 * p.nbatch, dto, ldc, p.nbatch, comp, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(c, "cublasGemmBatchedEx_64", st);
        }
    }
    if (!direct) write_out(c, o.data, ot);
    return launched(c);
}

/* -- integers: a tiled kernel that wraps ------------------------------------------------------ */

enum { TILE = 16 };

/* The integer product's operands a, b and c: batch strides in o[i].strides,
 * row and column strides beside. */
struct IntArgs {
    Shape   batch;
    Operand o[3];
    int64_t rs[3], cs[3];
    int64_t m, n, k;
};

/* One TILE x TILE block of C per block, one element per thread, stepping
 * over k through shared-memory tiles of A and B. Loads convert from each
 * operand's dtype (int32 @ uint8, say, needs no converted copy) and read any
 * strides; grid-stride loops over tiles and batches keep the grid in range. */
template <typename T> __global__ void __launch_bounds__(TILE * TILE) int_matmul(IntArgs g) {
    using U = typename Acc<T>::type;
    __shared__ U  as[TILE][TILE + 1], bs[TILE][TILE + 1];
    const int     tx = threadIdx.x, ty = threadIdx.y;
    const int64_t mt = (g.m + TILE - 1) / TILE, nt = (g.n + TILE - 1) / TILE;
    for (int64_t bi = blockIdx.z; bi < g.batch.nelem; bi += gridDim.z) {
        int64_t off[3];
        offsets<3, uint64_t>(g.batch, g.o, (uint64_t)bi, off);
        for (int64_t ti = blockIdx.y; ti < mt; ti += gridDim.y) {
            for (int64_t tj = blockIdx.x; tj < nt; tj += gridDim.x) {
                int64_t i = ti * TILE + ty, j = tj * TILE + tx;
                U       acc = 0;
                for (int64_t q0 = 0; q0 < g.k; q0 += TILE) {
                    int64_t qa = q0 + tx, qb = q0 + ty;
                    as[ty][tx] = i < g.m && qa < g.k
                                     ? load_as<U>(g.o[0].data, g.o[0].dtype, off[0] + i * g.rs[0] + qa * g.cs[0])
                                     : (U)0;
                    bs[ty][tx] = qb < g.k && j < g.n
                                     ? load_as<U>(g.o[1].data, g.o[1].dtype, off[1] + qb * g.rs[1] + j * g.cs[1])
                                     : (U)0;
                    __syncthreads();
#pragma unroll
                    for (int q = 0; q < TILE; q++) acc += as[ty][q] * bs[q][tx];
                    __syncthreads();
                }
                if (i < g.m && j < g.n)
                    store_as<T>((void *)g.o[2].data, g.o[2].dtype, off[2] + i * g.rs[2] + j * g.cs[2], (T)acc);
            }
        }
    }
}

template <typename T> int int_mm(const tide_devcall * c, const Problem & p) {
    IntArgs     g = {};
    const Mat * ms[3] = {&p.a, &p.b, &p.out};
    g.batch.ndim  = p.nb;
    g.batch.nelem = p.nbatch;
    for (int32_t d = 0; d < p.nb; d++) g.batch.sizes[d] = p.bsizes[d];
    for (int32_t i = 0; i < 3; i++) {
        g.o[i].data  = ms[i]->data;
        g.o[i].dtype = ms[i]->dtype;
        g.rs[i]      = ms[i]->rs;
        g.cs[i]      = ms[i]->cs;
        for (int32_t d = 0; d < p.nb; d++) g.o[i].strides[d] = ms[i]->bstr[d];
    }
    coalesce(g.batch, g.o, 3);
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    int64_t mt = (p.m + TILE - 1) / TILE, nt = (p.n + TILE - 1) / TILE;
    dim3    grid((unsigned)(nt < 65535 ? nt : 65535), (unsigned)(mt < 65535 ? mt : 65535),
                 (unsigned)(p.nbatch < 65535 ? p.nbatch : 65535));
    int_matmul<T><<<grid, dim3(TILE, TILE), 0, (cudaStream_t)c->stream>>>(g);
    return launched(c);
}

/* -- dot and outer ---------------------------------------------------------------------------- */

/* The sum of v over the block (THREADS threads), in a fixed order. */
template <typename A> __device__ A block_sum(A * sh, A v) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = sh[threadIdx.x] + sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

/* One partial sum of x . y per block; a second kernel adds them, so the
 * result does not depend on the order blocks run in (no atomics). */
template <typename A>
__global__ void __launch_bounds__(THREADS) dot_partial(const void * x, int32_t xt, int64_t xs, const void * y,
                                                       int32_t yt, int64_t ys, int64_t n, A * part) {
    __shared__ A sh[THREADS];
    A            acc = 0;
    for (int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        acc += load_as<A>(x, xt, i * xs) * load_as<A>(y, yt, i * ys);
    acc = block_sum(sh, acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

template <typename T, typename A>
__global__ void __launch_bounds__(THREADS) dot_final(const A * part, int32_t nparts, void * out, int32_t ot) {
    __shared__ A sh[THREADS];
    A            acc = 0;
    for (int32_t i = threadIdx.x; i < nparts; i += THREADS) acc += part[i];
    acc = block_sum(sh, acc);
    if (threadIdx.x == 0) store_as<T>(out, ot, 0, (T)acc);
}

/* Blocks of the first pass: enough to fill a device with room to spare. */
enum { DOT_BLOCKS = 1024 };

/* A lone 1 x k by k x 1 product (dot, or a matmul of that shape): a
 * reduction, which GEMM would run on a sliver of the device. */
template <typename T> int dot(const tide_devcall * c, const Problem & p) {
    using A             = typename Acc<T>::type;
    cudaStream_t stream = (cudaStream_t)c->stream;
    unsigned     blocks = blocks_for(p.k);
    if (blocks > DOT_BLOCKS) blocks = DOT_BLOCKS;
    A * part = (A *)scratch(c, blocks * sizeof(A));
    if (!part) return TIDE_DEVAPI_OOM;
    dot_partial<A><<<blocks, THREADS, 0, stream>>>(p.a.data, p.a.dtype, p.a.cs, p.b.data, p.b.dtype, p.b.rs, p.k,
                                                   part);
    dot_final<T, A><<<1, THREADS, 0, stream>>>(part, (int32_t)blocks, p.out.data, p.out.dtype);
    return launched(c);
}

/* out[.., i, j] = a[.., i, 0] * b[.., 0, j]: a product with k = 1, one
 * multiply per element (exact float32 products: no TF32 here). */
template <typename T, typename I> __global__ void __launch_bounds__(THREADS) outer_kernel(Shape s, Triple t) {
    using A = typename Acc<T>::type;
    for (uint64_t i = blockIdx.x * (uint64_t)THREADS + threadIdx.x; i < (uint64_t)s.nelem;
         i += (uint64_t)gridDim.x * THREADS) {
        int64_t off[3];
        offsets<3, I>(s, t.o, (I)i, off);
        A x = load_as<A>(t.o[0].data, t.o[0].dtype, off[0]), y = load_as<A>(t.o[1].data, t.o[1].dtype, off[1]);
        store_as<T>((void *)t.o[2].data, t.o[2].dtype, off[2], (T)(A)(x * y));
    }
}

template <typename T> int outer_run(const tide_devcall * c, const Problem & p) {
    Shape  s = {};
    Triple t = {};
    s.ndim   = p.nb + 2;
    s.nelem  = p.nbatch * p.m * p.n;
    for (int32_t d = 0; d < p.nb; d++) {
        s.sizes[d]        = p.bsizes[d];
        t.o[0].strides[d] = p.a.bstr[d];
        t.o[1].strides[d] = p.b.bstr[d];
        t.o[2].strides[d] = p.out.bstr[d];
    }
    /* a's column and b's row are the product's k = 1: a walks rows, b columns */
    s.sizes[p.nb]            = p.m;
    s.sizes[p.nb + 1]        = p.n;
    t.o[0].strides[p.nb]     = p.a.rs;
    t.o[1].strides[p.nb + 1] = p.b.cs;
    t.o[2].strides[p.nb]     = p.out.rs;
    t.o[2].strides[p.nb + 1] = p.out.cs;
    const Mat * ms[3] = {&p.a, &p.b, &p.out};
    for (int32_t i = 0; i < 3; i++) {
        t.o[i].data  = ms[i]->data;
        t.o[i].dtype = ms[i]->dtype;
    }
    coalesce(s, t.o, 3);
    cudaStream_t stream = (cudaStream_t)c->stream;
    if (s.nelem <= (int64_t)UINT32_MAX)
        outer_kernel<T, uint32_t><<<blocks_for(s.nelem), THREADS, 0, stream>>>(s, t);
    else
        outer_kernel<T, uint64_t><<<blocks_for(s.nelem), THREADS, 0, stream>>>(s, t);
    return launched(c);
}

/* -- the kernels ------------------------------------------------------------------------------- */

/* The registry gives device tensors; a host number (data NULL with elements)
 * has no place in a product. */
int check_inputs(const tide_devcall * c) {
    for (int32_t i = 0; i < 2; i++)
        if (c->in[i].ndim == 0 || (!c->in[i].data && c->in[i].nelem > 0))
            return set_error(TIDE_DEVAPI_ERROR, "%s: input %d is not a device tensor of at least 1 dim", c->op, i + 1);
    return TIDE_DEVAPI_OK;
}

int matmul(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    if (int rc = check_inputs(c)) return rc;
    Problem p  = matmul_problem(c);
    int32_t ct = c->compute_dtype;
    if (p.nbatch == 1 && p.m == 1 && p.n == 1) {
        switch (ct) {
        case TIDE_DTYPE_F32: return dot<float>(c, p);
        case TIDE_DTYPE_F64: return dot<double>(c, p);
        case TIDE_DTYPE_I32: return dot<int32_t>(c, p);
        case TIDE_DTYPE_I64: return dot<int64_t>(c, p);
        case TIDE_DTYPE_U8:  return dot<uint8_t>(c, p);
        default:             return no_dtype(c, ct);
        }
    }
    switch (ct) {
    case TIDE_DTYPE_F32:
    case TIDE_DTYPE_F64: return gemm(c, p);
    case TIDE_DTYPE_I32: return int_mm<int32_t>(c, p);
    case TIDE_DTYPE_I64: return int_mm<int64_t>(c, p);
    case TIDE_DTYPE_U8:  return int_mm<uint8_t>(c, p);
    default:             return no_dtype(c, ct);
    }
}

int outer(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    if (int rc = check_inputs(c)) return rc;
    Problem p  = outer_problem(c);
    int32_t ct = c->compute_dtype;
    switch (ct) {
    case TIDE_DTYPE_F32: return outer_run<float>(c, p);
    case TIDE_DTYPE_F64: return outer_run<double>(c, p);
    case TIDE_DTYPE_I32: return outer_run<int32_t>(c, p);
    case TIDE_DTYPE_I64: return outer_run<int64_t>(c, p);
    case TIDE_DTYPE_U8:  return outer_run<uint8_t>(c, p);
    default:             return no_dtype(c, ct);
    }
}

}   // namespace

/* -- the device's cuBLAS handle, for this file and linalg.cu (common.cuh) ------------------- */

int blas_handle(const tide_devcall * c, int math, BlasHandle & out) {
    if (c->dev < 0 || c->dev >= MAX_DEVICES)
        return set_error(TIDE_DEVAPI_ERROR, "%s: cuBLAS handles are kept for devices 0 to %d, not %d", c->op,
                         MAX_DEVICES - 1, c->dev);
    Handle &       hd = handles[c->dev];
    const char *   fn = nullptr;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    hd.mu.lock();
    if (!hd.h) {
        if ((st = cublasCreate(&hd.h)) != CUBLAS_STATUS_SUCCESS) {
            hd.h = nullptr;   /* tried again by the next call */
            fn   = "cublasCreate";
        } else if ((st = cublasSetPointerMode(hd.h, CUBLAS_POINTER_MODE_HOST)) != CUBLAS_STATUS_SUCCESS) {
            fn = "cublasSetPointerMode";
        }
    }
    if (!fn && (st = cublasSetStream(hd.h, (cudaStream_t)c->stream)) != CUBLAS_STATUS_SUCCESS) fn = "cublasSetStream";
    if (!fn && (st = cublasSetMathMode(hd.h, (cublasMath_t)math)) != CUBLAS_STATUS_SUCCESS) fn = "cublasSetMathMode";
    if (fn) {
        hd.mu.unlock();
        return set_error(st == CUBLAS_STATUS_ALLOC_FAILED ? TIDE_DEVAPI_OOM : TIDE_DEVAPI_ERROR, "%s: %s failed: %s (%s)",
                         c->op, fn, cublasGetStatusString(st), cublasGetStatusName(st));
    }
    out.h   = hd.h;
    out.dev = c->dev;
    return TIDE_DEVAPI_OK;
}

BlasHandle::~BlasHandle() {
    if (h) handles[dev].mu.unlock();
}

const kernel_entry blas_kernels[] = {
    {"matmul", matmul}, {"mm", matmul}, {"bmm", matmul}, {"dot", matmul}, {"outer", outer}, {nullptr, nullptr},
};

}   // namespace tide_cuda
