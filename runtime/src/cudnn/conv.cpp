/*
 * conv.cpp - libtide_cudnn: conv2d, conv2d_backward_input and
 * conv2d_backward_weight on CUDA through cuDNN's convolutions, with the
 * results of runtime/src/ops/cpu/conv.c. A library of its own, compiled by the
 * host compiler and linked to libcudnn alone, which libtide_cuda loads the
 * first time it is asked for one of these kernels (cudnn_kernels.h): where
 * cuDNN is missing, libtide_cuda still loads and only these ops lack a kernel.
 *
 * cuDNN reads and writes the image-like operands (x, the result y and their
 * gradients) in place when their strides follow an NCHW or NHWC order, gaps
 * allowed; the filter it takes packed NCHW only. Any other operand is packed
 * into scratch memory first by libtide_cuda's copy kernel (a result is
 * written there and copied out after): it takes any strides, the zero ones of
 * an expanded tensor too, which cuDNN's tensor descriptors (those of
 * cudnnTransformTensor included) do not take. The bias is libtide_cuda's add
 * after the convolution, an empty sum its copy of zeros or of the bias. Should cuDNN
 * refuse the operands as they are (a layout or an alignment it has no
 * algorithm for), the call is tried once more with every operand packed.
 * Algorithms come from cuDNN's heuristics, not from its Find functions, which
 * would synchronise with the device; the ranking is kept per problem, and the
 * first algorithm whose workspace the scratch allocator can give runs.
 */
#include "cudnn/cudnn_kernels.h"

#include <cudnn.h>

#include <initializer_list>
#include <mutex>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace {

const tide_cudnn_hooks * hooks;   /* libtide_cuda's, given when it loaded this library */

/* -- errors ------------------------------------------------------------------------------- */

/* Keeps the message for libtide_cuda's error_text and returns `code`. */
__attribute__((format(printf, 2, 3))) int fail(int code, const char * fmt, ...) {
    char    buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return hooks->set_error(code, "%s", buf);
}

const char * dtype_name(int32_t d) {
    static const char * const names[] = {"float32", "float64", "int32",   "int64",
                                         "uint8",   "bool",    "float16", "bfloat16"};
    return d >= 0 && d < TIDE_DTYPE_COUNT ? names[d] : "?";
}

/* "[2,3,8,8]", as tide_dims_str writes shapes in messages. */
const char * dims_str(const tide_devtensor & t, char * buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < t.ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)t.sizes[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* -- the problem -------------------------------------------------------------------------- */

enum Kind { FORWARD, BACKWARD_DATA, BACKWARD_FILTER };

/* One operand as cuDNN gets it: the call's tensor, and the memory, sizes and
 * strides cuDNN reads or writes, the tensor's own or those of a packed NCHW
 * copy in scratch memory (`packed`: copied in before, or out after, the
 * convolution). */
struct Operand {
    const tide_devtensor * t;
    bool                   output;
    bool                   packed;
    void *                 data;
    int                    dims[4], strides[4];
};

/* A call as cuDNN's convolution sees it: x the image ([N,C,H,W]: the input, or
 * the gradient backward_input computes), w the filter ([O,C/groups,kH,kW]: the
 * weight or the gradient backward_weight computes) and y the result of the
 * forward convolution ([N,O,oH,oW]: conv2d's result, or the backward ops'
 * grad_output). */
struct Problem {
    const tide_devcall *   c;
    Kind                   kind;
    int32_t                dtype;   /* every operand's, float16/bfloat16 computing in float32 */
    int                    sh, sw, ph, pw, dh, dw, groups;
    bool                   tf32;    /* float32 may use TF32 tensor cores (tide.cuda.allow_tf32) */
    Operand                x, w, y;
    const tide_devtensor * bias;    /* conv2d's third input, or NULL */
};

/* "input [2,3,8,8] and weight [4,3,3,3], stride 1x1, padding 0x0, dilation 1x1, groups 1, float32" */
const char * describe(const Problem & p, char * buf, size_t n) {
    static const char * const first[] = {"input", "grad_output", "grad_output"};
    static const char * const second[] = {"weight", "weight", "input"};
    char a[128], b[128];
    snprintf(buf, n, "%s %s and %s %s, stride %dx%d, padding %dx%d, dilation %dx%d, groups %d, %s", first[p.kind],
             dims_str(p.c->in[0], a, sizeof a), second[p.kind], dims_str(p.c->in[1], b, sizeof b), p.sh, p.sw, p.ph,
             p.pw, p.dh, p.dw, p.groups, dtype_name(p.dtype));
    return buf;
}

/* What cuDNN refuses to do with the operands as given (a layout, a shape, an
 * alignment): worth a second try with every operand packed. */
bool refusal(cudnnStatus_t st) {
    int cat = CUDNN_STATUS_CATEGORY(st);
    return cat == CUDNN_STATUS_BAD_PARAM || cat == CUDNN_STATUS_NOT_SUPPORTED;
}

/* attempt()'s answer when cuDNN refused the problem (refusal()): its message is kept. */
enum { REFUSED = 100 };

/* Keeps "op: fn failed for <problem>: STATUS (cuDNN's detail)" and returns the
 * code: OOM for an allocation cuDNN could not make, REFUSED for a refusal. */
int cudnn_fail(const Problem & p, const char * fn, cudnnStatus_t st, const char * detail) {
    char what[512];
    int  code = TIDE_DEVAPI_ERROR;
    if (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        code = TIDE_DEVAPI_OOM;
    else if (refusal(st))
        code = REFUSED;
    fail(code, "%s: %s failed for %s: %s%s%s%s", p.c->op, fn, describe(p, what, sizeof what),
         cudnnGetErrorString(st), detail && *detail ? " (" : "", detail ? detail : "", detail && *detail ? ")" : "");
    return code;
}

/* cudnn_fail with cuDNN's own account of the last error on this thread. */
int cudnn_fail(const Problem & p, const char * fn, cudnnStatus_t st) {
    char detail[256];
    detail[0] = 0;
    cudnnGetLastErrorString(detail, sizeof detail);
    return cudnn_fail(p, fn, st, detail);
}

/* -- layouts -------------------------------------------------------------------------------- */

const int NCHW[4] = {0, 1, 2, 3}, NHWC[4] = {0, 2, 3, 1};

/* Whether cuDNN can take t as it is, its dims outermost first in `order`:
 * each steps over at least the extent of the dims inside it (positive
 * strides, no overlap), all within cuDNN's int range. Fills the strides to
 * give it: a size-1 dim, whose stride means nothing to the data, gets the one
 * a packed tensor of that order would have, as cuDNN infers the layout from
 * all four. */
bool in_order(const tide_devtensor & t, const int * order, int * strides) {
    int64_t ext = 1;   /* the extent, in elements, of the dims inside */
    for (int i = 3; i >= 0; i--) {
        int     d = order[i];
        int64_t size = t.sizes[d], st = size == 1 ? ext : t.strides[d];
        if (st < ext || st > INT32_MAX || size > INT32_MAX) return false;
        strides[d] = (int)st;
        ext        = st * size;
    }
    return ext <= INT32_MAX;
}

/* Whether t is packed NCHW (size-1 dims aside); fills its strides. */
bool packed_nchw(const tide_devtensor & t, int * strides) {
    if (!in_order(t, NCHW, strides)) return false;
    int64_t step = 1;
    for (int d = 3; d >= 0; d--) {
        if (strides[d] != step) return false;
        step *= t.sizes[d];
    }
    return true;
}

bool aligned16(const void * p) { return (uintptr_t)p % 16 == 0; }

/* Decides how cuDNN gets o: in place, or packed. The filter must be packed
 * NCHW; on the second try (`strict`), after cuDNN refused the first, every
 * operand must be packed NCHW and 16-byte aligned, as a scratch copy is. */
void lay_out(Operand & o, bool filter, bool strict) {
    const tide_devtensor & t = *o.t;
    for (int d = 0; d < 4; d++) o.dims[d] = (int)t.sizes[d];
    if (strict || filter) o.packed = !packed_nchw(t, o.strides) || (strict && !aligned16(t.data));
    else o.packed = !in_order(t, NCHW, o.strides) && !in_order(t, NHWC, o.strides);
    if (o.packed) {
        int step = 1;
        for (int d = 3; d >= 0; d--) {
            o.strides[d] = step;
            step *= o.dims[d];
        }
    }
}

/* -- libtide_cuda's kernels ------------------------------------------------------------------- */

/* A dense NCHW tensor of `dims` at data. */
tide_devtensor dense4(void * data, int32_t dtype, const int * dims) {
    tide_devtensor t;
    memset(&t, 0, sizeof t);
    t.data       = data;
    t.dtype      = dtype;
    t.ndim       = 4;
    int64_t step = 1;
    for (int d = 3; d >= 0; d--) {
        t.sizes[d]   = dims[d];
        t.strides[d] = step;
        step *= dims[d];
    }
    t.nelem = step;
    return t;
}

/* The bias [O] as [O,1,1], which broadcasts over a result [N,O,oH,oW]. */
tide_devtensor bias_view(const tide_devtensor & b) {
    tide_devtensor v = b;
    v.ndim           = 3;
    v.sizes[1] = v.sizes[2] = 1;
    v.strides[1] = v.strides[2] = 0;
    return v;
}

/* The host number 0. */
tide_devtensor zero(int32_t dtype) {
    tide_devtensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.nelem = 1;
    return t;
}

/* Runs libtide_cuda's kernel `name` (a registry op) for out = name(in...), a
 * call derived from c: the same op name for messages, device, stream and
 * scratch memory, no params. */
int run_kernel(const Problem & p, const char * name, const tide_devtensor * in, int32_t n_in,
               const tide_devtensor & out) {
    const tide_devcall * c  = p.c;
    tide_devkernel_fn    fn = hooks->kernel(name);
    if (!fn) return fail(TIDE_DEVAPI_ERROR, "%s: libtide_cuda has no %s kernel", c->op, name);
    tide_devcall d  = *c;
    d.n_in          = n_in;
    d.n_out         = 1;
    d.compute_dtype = p.dtype == TIDE_DTYPE_F64 ? TIDE_DTYPE_F64 : TIDE_DTYPE_F32;
    for (int32_t i = 0; i < n_in; i++) d.in[i] = in[i];
    d.out[0] = out;
    memset(&d.p, 0, sizeof d.p);
    d.p.dtype = -1;
    return fn(&d);
}

int copy(const Problem & p, const tide_devtensor & dst, const tide_devtensor & src) {
    return run_kernel(p, "copy", &src, 1, dst);
}

/* -- cuDNN: descriptors, handles, algorithms ---------------------------------------------- */

cudnnDataType_t cudnn_type(int32_t dt) {
    switch (dt) {
    case TIDE_DTYPE_F64:  return CUDNN_DATA_DOUBLE;
    case TIDE_DTYPE_F16:  return CUDNN_DATA_HALF;
    case TIDE_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
    default:              return CUDNN_DATA_FLOAT;
    }
}

/* The math type asked of the heuristics: float32 without TF32 must keep to
 * FMA kernels (cuDNN's default math lets Ampere and later use TF32); half
 * types may use tensor cores. The heuristics answer each algorithm with the
 * math type to run it with, which stands except where FMA is required. */
cudnnMathType_t base_math(const Problem & p) {
    if (p.dtype == TIDE_DTYPE_F32) return p.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    if (p.dtype == TIDE_DTYPE_F16 || p.dtype == TIDE_DTYPE_BF16) return CUDNN_TENSOR_OP_MATH;
    return CUDNN_DEFAULT_MATH;
}

/* The descriptors of one attempt, made per call (host-side structs, cheap). */
struct Descs {
    cudnnTensorDescriptor_t      x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t      w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    Descs()                          = default;
    Descs(const Descs &)             = delete;
    Descs & operator=(const Descs &) = delete;
    ~Descs() {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }

    /* Sets them up for p; on failure names the cuDNN function in *fn. */
    cudnnStatus_t make(const Problem & p, const char ** fn) {
        cudnnDataType_t dt = cudnn_type(p.dtype);
        cudnnStatus_t   st;
        *fn = "cudnnCreateTensorDescriptor";
        if ((st = cudnnCreateTensorDescriptor(&x)) || (st = cudnnCreateTensorDescriptor(&y))) return st;
        *fn = "cudnnCreateFilterDescriptor";
        if ((st = cudnnCreateFilterDescriptor(&w))) return st;
        *fn = "cudnnCreateConvolutionDescriptor";
        if ((st = cudnnCreateConvolutionDescriptor(&conv))) return st;
        *fn = "cudnnSetTensorNdDescriptor";
        if ((st = cudnnSetTensorNdDescriptor(x, dt, 4, p.x.dims, p.x.strides))) return st;
        if ((st = cudnnSetTensorNdDescriptor(y, dt, 4, p.y.dims, p.y.strides))) return st;
        *fn = "cudnnSetFilter4dDescriptor";
        if ((st = cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, p.w.dims[0], p.w.dims[1], p.w.dims[2],
                                             p.w.dims[3])))
            return st;
        /* halves store the data and compute in float32 (cuDNN's PSEUDO_HALF configurations) */
        *fn = "cudnnSetConvolution2dDescriptor";
        if ((st = cudnnSetConvolution2dDescriptor(conv, p.ph, p.pw, p.sh, p.sw, p.dh, p.dw, CUDNN_CROSS_CORRELATION,
                                                  p.dtype == TIDE_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT)))
            return st;
        *fn = "cudnnSetConvolutionGroupCount";
        if ((st = cudnnSetConvolutionGroupCount(conv, p.groups))) return st;
        *fn = "cudnnSetConvolutionMathType";
        return cudnnSetConvolutionMathType(conv, base_math(p));
    }
};

/* An algorithm to run, with its math type and workspace size. */
struct Algo {
    int32_t algo, math;
    size_t  workspace;
};

enum { MAX_ALGOS = 8, CACHE_SIZE = 64, MAX_DEVICES = 64 };

/* What determines the algorithms: the kind, dtype and math, the sizes and the
 * strides cuDNN is given, the convolution's params, and which operands are
 * 16-byte aligned (an alignment an algorithm needs is only known when it runs). */
struct Key {
    int32_t v[40];
};

Key make_key(const Problem & p) {
    Key k;
    memset(&k, 0, sizeof k);
    int32_t * v = k.v;
    *v++        = p.kind;
    *v++        = p.dtype;
    *v++        = base_math(p);
    for (const Operand * o : {&p.x, &p.w, &p.y}) {
        for (int d = 0; d < 4; d++) *v++ = o->dims[d];
        for (int d = 0; d < 4; d++) *v++ = o->strides[d];
        *v++ = aligned16(o->data);
    }
    for (int x : {p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.groups}) *v++ = x;
    return k;
}

/* The heuristics' answer for one key: the algorithms to try in order, or
 * none, with the refusal that left none (the function, status and detail). */
struct Entry {
    Key           key;
    bool          used;
    int32_t       n;
    Algo          algos[MAX_ALGOS];
    const char *  fn;
    cudnnStatus_t status;
    char          detail[160];
};

/* One cuDNN handle per device, made on first use and kept for the process
 * (destroying it at exit could run after the CUDA runtime is gone), and the
 * device's algorithm choices. The engine launches a device's ops from one
 * thread; the lock still keeps one caller's stream, set on the handle before
 * every call, from changing under another. */
struct Device {
    std::mutex    mu;
    cudnnHandle_t h = nullptr;
    Entry         cache[CACHE_SIZE];
    int32_t       next = 0;   /* the entry a new key replaces: round robin */
};
Device devices[MAX_DEVICES];

Entry * find(Device & dv, const Key & k) {
    for (Entry & e : dv.cache)
        if (e.used && memcmp(&e.key, &k, sizeof k) == 0) return &e;
    return nullptr;
}

const char * const workspace_fn[] = {"cudnnGetConvolutionForwardWorkspaceSize",
                                     "cudnnGetConvolutionBackwardDataWorkspaceSize",
                                     "cudnnGetConvolutionBackwardFilterWorkspaceSize"};

cudnnStatus_t workspace_size(cudnnHandle_t h, const Problem & p, const Descs & d, int32_t algo, size_t * size) {
    switch (p.kind) {
    case FORWARD:
        return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)algo,
                                                       size);
    case BACKWARD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, size);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, size);
    }
}

/* A candidate of the heuristics, in their order. */
struct Candidate {
    int32_t       algo, math;
    bool          deterministic;
    cudnnStatus_t status;
};

/* Fills `out` with up to 16 candidates; returns the heuristics' status. */
template <typename Perf> int32_t take(const Perf * perf, int got, Candidate * out) {
    int32_t n = 0;
    for (int i = 0; i < got && n < 16; i++)
        out[n++] = {(int32_t)perf[i].algo, (int32_t)perf[i].mathType, perf[i].determinism == CUDNN_DETERMINISTIC,
                    perf[i].status};
    return n;
}

/* Ranks the algorithms for p into e: those the heuristics can run, in their
 * order, deterministic ones first (the CPU's results do not depend on
 * scheduling, and a non-deterministic algorithm only leads where no other
 * can run), each with its math type and workspace size. */
void rank(cudnnHandle_t h, const Problem & p, const Descs & d, Entry & e) {
    Candidate     cand[16];
    int32_t       n   = 0;
    int           got = 0;
    cudnnStatus_t st;
    e.n         = 0;
    e.detail[0] = 0;
    switch (p.kind) {
    case FORWARD: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        e.fn = "cudnnGetConvolutionForwardAlgorithm_v7";
        st   = cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                      &got, perf);
        if (st == CUDNN_STATUS_SUCCESS) n = take(perf, got, cand);
        break;
    }
    case BACKWARD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        e.fn = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
        st   = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf);
        if (st == CUDNN_STATUS_SUCCESS) n = take(perf, got, cand);
        break;
    }
    default: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        e.fn = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
        st   = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf);
        if (st == CUDNN_STATUS_SUCCESS) n = take(perf, got, cand);
        break;
    }
    }
    e.status = st != CUDNN_STATUS_SUCCESS ? st : n > 0 ? cand[0].status : CUDNN_STATUS_NOT_SUPPORTED;
    if (st != CUDNN_STATUS_SUCCESS) {
        cudnnGetLastErrorString(e.detail, sizeof e.detail);
        return;
    }
    cudnnMathType_t base  = base_math(p);
    bool            fixed = base == CUDNN_FMA_MATH;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < n && e.n < MAX_ALGOS; i++) {
            const Candidate & k = cand[i];
            if (k.status != CUDNN_STATUS_SUCCESS || k.deterministic != (pass == 0)) continue;
            cudnnMathType_t math = fixed ? base : (cudnnMathType_t)k.math;
            size_t          size = 0;
            if ((st = cudnnSetConvolutionMathType(d.conv, math)) == CUDNN_STATUS_SUCCESS)
                st = workspace_size(h, p, d, k.algo, &size);
            if (st != CUDNN_STATUS_SUCCESS) {   /* the heuristics offered what cannot run: the next one */
                e.fn     = workspace_fn[p.kind];
                e.status = st;
                cudnnGetLastErrorString(e.detail, sizeof e.detail);
                continue;
            }
            e.algos[e.n++] = {k.algo, (int32_t)math, size};
        }
    }
}

cudnnStatus_t execute(cudnnHandle_t h, const Problem & p, const Descs & d, const Algo & a, void * ws) {
    static const float  one_f = 1, zero_f = 0;
    static const double one_d = 1, zero_d = 0;
    /* the scaling factors are double for double data, float for the others; beta 0: overwrite */
    bool         dbl  = p.dtype == TIDE_DTYPE_F64;
    const void * one  = dbl ? (const void *)&one_d : (const void *)&one_f;
    const void * zero = dbl ? (const void *)&zero_d : (const void *)&zero_f;
    switch (p.kind) {
    case FORWARD:
        return cudnnConvolutionForward(h, one, d.x, p.x.data, d.w, p.w.data, d.conv, (cudnnConvolutionFwdAlgo_t)a.algo,
                                       ws, a.workspace, zero, d.y, p.y.data);
    case BACKWARD_DATA:
        return cudnnConvolutionBackwardData(h, one, d.w, p.w.data, d.y, p.y.data, d.conv,
                                            (cudnnConvolutionBwdDataAlgo_t)a.algo, ws, a.workspace, zero, d.x,
                                            p.x.data);
    default:
        return cudnnConvolutionBackwardFilter(h, one, d.x, p.x.data, d.y, p.y.data, d.conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)a.algo, ws, a.workspace, zero, d.w,
                                              p.w.data);
    }
}

/* -- the kernels ----------------------------------------------------------------------------- */

size_t round_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* One try at p: `strict` packs every operand cuDNN cannot take as packed,
 * aligned NCHW. Returns REFUSED, its message kept, when cuDNN refuses it. */
int attempt(Problem & p, bool strict) {
    const tide_devcall * c      = p.c;
    Operand * const      ops[3] = {&p.x, &p.w, &p.y};
    size_t               esz    = p.dtype == TIDE_DTYPE_F64 ? 8 : p.dtype == TIDE_DTYPE_F32 ? 4 : 2, total = 0;
    for (Operand * o : ops) {
        lay_out(*o, o == &p.w, strict);
        o->data = o->t->data;
        if (o->packed) total += round_up((size_t)o->t->nelem * esz);
    }
    /* the packed operands' place, before the key (their alignment is part of it) */
    char * pack = nullptr;
    if (total) {
        if (!(pack = (char *)c->scratch(c->scratch_ctx, total))) return TIDE_DEVAPI_OOM;
        size_t off = 0;
        for (Operand * o : ops)
            if (o->packed) {
                o->data = pack + off;
                off += round_up((size_t)o->t->nelem * esz);
            }
    }

    Descs        d;
    const char * fn = nullptr;
    if (cudnnStatus_t st = d.make(p, &fn)) return cudnn_fail(p, fn, st);

    {
        Device &                    dv = devices[c->dev];
        std::lock_guard<std::mutex> lock(dv.mu);
        cudnnStatus_t               st;
        if (!dv.h) {
            if ((st = cudnnCreate(&dv.h)) != CUDNN_STATUS_SUCCESS) {
                dv.h = nullptr;   /* tried again by the next call */
                return cudnn_fail(p, "cudnnCreate", st);
            }
        }
        if ((st = cudnnSetStream(dv.h, (cudaStream_t)c->stream)) != CUDNN_STATUS_SUCCESS)
            return cudnn_fail(p, "cudnnSetStream", st);

        Key     key = make_key(p);
        Entry * e   = find(dv, key);
        if (!e) {
            e       = &dv.cache[dv.next];
            dv.next = (dv.next + 1) % CACHE_SIZE;
            e->key  = key;
            e->used = true;
            rank(dv.h, p, d, *e);
        }
        if (e->n == 0) return cudnn_fail(p, e->fn, e->status, e->detail);

        /* the inputs cuDNN cannot read in place, packed before it runs (same stream) */
        for (Operand * o : ops)
            if (o->packed && !o->output)
                if (int rc = copy(p, dense4(o->data, p.dtype, o->dims), *o->t)) return rc;

        /* The algorithms in order, the first that runs wins; one cuDNN
         * refuses at run time (an alignment it needs, say) passes to the
         * next, and so does one whose workspace there is no memory for. A
         * call has few scratch blocks (devcall.c): at most two workspaces,
         * the larger one also serving the algorithms after it. */
        static const char * const names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                             "cudnnConvolutionBackwardFilter"};
        void *  ws      = nullptr;
        size_t  ws_size = 0;
        int32_t blocks  = 0, i = 0;
        bool    ran = false, refused = false;
        for (; i < e->n; i++) {
            const Algo & a = e->algos[i];
            if (a.workspace > ws_size) {
                void * more = blocks < 2 ? c->scratch(c->scratch_ctx, a.workspace) : nullptr;
                if (!more) continue;
                blocks++;
                ws      = more;
                ws_size = a.workspace;
            }
            if ((st = cudnnSetConvolutionMathType(d.conv, (cudnnMathType_t)a.math)) == CUDNN_STATUS_SUCCESS)
                st = execute(dv.h, p, d, a, ws);
            if (st == CUDNN_STATUS_SUCCESS) {
                ran = true;
                break;
            }
            int rc = cudnn_fail(p, names[p.kind], st);
            if (rc != REFUSED) return rc;
            refused = true;
        }
        if (!ran && refused) return REFUSED;   /* its message kept */
        if (!ran) {   /* libtide's allocator has said why, unless the blocks ran out */
            char what[512];
            return fail(TIDE_DEVAPI_OOM, "%s: no memory for the workspace of any cuDNN algorithm for %s", c->op,
                        describe(p, what, sizeof what));
        }
        /* The next call of this key starts with the algorithm that ran: asking
         * again for a workspace there was no memory for would have the
         * allocator give back its cache (and wait for the device) every time. */
        if (i > 0) {
            memmove(e->algos, e->algos + i, (size_t)(e->n - i) * sizeof(Algo));
            e->n -= i;
        }
    }

    /* a result written to scratch goes to the output tensor, and the bias is added to it */
    for (Operand * o : ops)
        if (o->packed && o->output)
            if (int rc = copy(p, *o->t, dense4(o->data, p.dtype, o->dims))) return rc;
    if (p.bias) {
        tide_devtensor in[2] = {*p.y.t, bias_view(*p.bias)};
        if (int rc = run_kernel(p, "add", in, 2, *p.y.t)) return rc;
    }
    return TIDE_DEVAPI_OK;
}

bool is_float(int32_t dt) {
    return dt == TIDE_DTYPE_F32 || dt == TIDE_DTYPE_F64 || dt == TIDE_DTYPE_F16 || dt == TIDE_DTYPE_BF16;
}

int conv(const tide_devcall * c, Kind kind) {
    if (int rc = hooks->use(c->dev)) return rc;
    const tide_devtensor & out = c->out[0];
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    if (c->dev < 0 || c->dev >= MAX_DEVICES)
        return fail(TIDE_DEVAPI_ERROR, "%s: cuDNN handles are kept for devices 0 to %d, not %d", c->op,
                    MAX_DEVICES - 1, c->dev);

    /* what the registry has checked already, and what this kernel needs besides */
    int32_t n_in = kind == FORWARD && c->n_in == 3 ? 3 : 2;
    int32_t dt   = c->in[0].dtype;
    if (!is_float(dt)) return fail(TIDE_DEVAPI_ERROR, "the cuDNN %s kernel has no instance for dtype %s", c->op,
                                   dtype_name(dt));
    for (int32_t i = 0; i <= n_in; i++) {
        const tide_devtensor & t = i < n_in ? c->in[i] : out;
        if (t.dtype != dt)
            return fail(TIDE_DEVAPI_ERROR, "%s: the cuDNN kernel takes operands of one dtype, got %s and %s", c->op,
                        dtype_name(dt), dtype_name(t.dtype));
        if (t.ndim != (i == 2 && i < n_in ? 1 : 4) || (!t.data && t.nelem > 0))
            return fail(TIDE_DEVAPI_ERROR, "%s: operand %d is not a device tensor of the expected dims", c->op, i + 1);
    }
    if (c->p.n_ints < 7) return fail(TIDE_DEVAPI_ERROR, "%s: expects 7 ints of params, got %d", c->op, c->p.n_ints);

    Problem p;
    p.c     = c;
    p.kind  = kind;
    p.dtype = dt;
    p.tf32  = (c->flags & TIDE_DEVCALL_ALLOW_TF32) != 0;
    p.bias  = n_in == 3 ? &c->in[2] : nullptr;
    int * params[7] = {&p.sh, &p.sw, &p.ph, &p.pw, &p.dh, &p.dw, &p.groups};
    for (int i = 0; i < 7; i++) {
        if (c->p.ints[i] < 0 || c->p.ints[i] > INT32_MAX)
            return fail(TIDE_DEVAPI_ERROR, "%s: param %d (%lld) is out of cuDNN's range", c->op, i + 1,
                        (long long)c->p.ints[i]);
        *params[i] = (int)c->p.ints[i];
    }
    const tide_devtensor * x = kind == FORWARD ? &c->in[0] : kind == BACKWARD_DATA ? &out : &c->in[1];
    const tide_devtensor * w = kind == BACKWARD_FILTER ? &out : &c->in[1];
    const tide_devtensor * y = kind == FORWARD ? &out : &c->in[0];
    p.x = {x, kind == BACKWARD_DATA, false, nullptr, {0}, {0}};
    p.w = {w, kind == BACKWARD_FILTER, false, nullptr, {0}, {0}};
    p.y = {y, kind == FORWARD, false, nullptr, {0}, {0}};

    /* Nothing to sum over (no input channels or taps, an empty batch, or an
     * input that is all padding): the result is the bias, or zeros, as on the
     * CPU; cuDNN takes no empty tensor. */
    if (x->nelem == 0 || w->nelem == 0 || y->nelem == 0) {
        tide_devtensor src = p.bias ? bias_view(*p.bias) : zero(dt);
        return copy(p, out, src);
    }
    for (const tide_devtensor * t : {x, w, y})
        if (t->nelem > INT32_MAX) {
            char a[128], what[512];
            return fail(TIDE_DEVAPI_ERROR, "%s: cuDNN takes tensors of fewer than 2^31 elements, not %s (%s)", c->op,
                        dims_str(*t, a, sizeof a), describe(p, what, sizeof what));
        }

    int rc = attempt(p, false);
    if (rc == REFUSED) rc = attempt(p, true);
    return rc == REFUSED ? TIDE_DEVAPI_ERROR : rc;
}

int conv2d(const tide_devcall * c) { return conv(c, FORWARD); }
int conv2d_backward_input(const tide_devcall * c) { return conv(c, BACKWARD_DATA); }
int conv2d_backward_weight(const tide_devcall * c) { return conv(c, BACKWARD_FILTER); }

struct Named {
    const char *      name;
    tide_devkernel_fn fn;
};
const Named kernels[] = {
    {"conv2d", conv2d},
    {"conv2d_backward_input", conv2d_backward_input},
    {"conv2d_backward_weight", conv2d_backward_weight},
};

tide_devkernel_fn kernel(const char * op) {
    for (const Named & k : kernels)
        if (strcmp(k.name, op) == 0) return k.fn;
    return nullptr;
}

const tide_cudnn_table table = {TIDE_CUDNN_VERSION, kernel};

}   // namespace

extern "C" __attribute__((visibility("default"))) const tide_cudnn_table * tide_cudnn_kernels(
    int32_t version, const tide_cudnn_hooks * h) {
    if (version != TIDE_CUDNN_VERSION || !h || h->version != TIDE_CUDNN_VERSION ||
        h->devapi_version != TIDE_DEVAPI_VERSION)
        return nullptr;
    hooks = h;
    return &table;
}
