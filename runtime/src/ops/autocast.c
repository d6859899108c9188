/*
 * autocast.c - mixed precision by op, as torch.autocast: while a thread has
 * autocast on for a kind of device, tide_op_call casts the inputs of the ops
 * that run on that kind of device before running them. Matrix products and
 * convolutions take float16 or bfloat16 inputs (where the hardware is fast);
 * ops whose results need range or precision (exp, log, pow, softmax, sums,
 * cumulative sums, linear algebra) take float32; a few ops whose kernels want
 * one dtype take the widest of their inputs'. Every other op runs on what it
 * is given. Only float32, float16 and bfloat16 tensors are cast (float64
 * stays as it is, as do host numbers), and only in calls that make a new
 * result: in-place and out= calls are left alone.
 *
 * Casts are ordinary (recorded, differentiable) copy ops, so gradients flow
 * back in the input's dtype. Backward walks run with autocast off (the rules
 * compute in the forward's dtypes). A leaf that requires grad (a weight) is
 * cast once per autocast region and version, as PyTorch caches them, except
 * during a jit capture, where each use must be an op of the graph.
 */
#include "../core/internal.h"
#include "../graph/graph.h"

#include <pthread.h>
#include <string.h>

_Thread_local int32_t tide_autocast_on;   /* the number of device kinds with autocast on */
static _Thread_local int32_t autocast_dtype[2] = {-1, -1};   /* per TIDE_DEVICE_*: the low dtype, or -1 */

enum { LOW = 1, F32, WIDEST };

/* The policy of each op, by name: what the registry calls it. */
static const char * const low_ops[] = {"matmul", "mm", "bmm", "conv2d", "conv2d_backward_input"};
static const char * const f32_ops[] = {
    "exp",      "expm1",     "log",         "log1p",        "log2",           "log10",       "pow",
    "reciprocal", "rsqrt",   "acos",        "asin",         "cosh",           "sinh",        "tan",
    "erfinv",   "lgamma",    "digamma",     "polygamma",    "softmax",        "log_softmax", "logsumexp",
    "sum",      "prod",      "var",         "std",          "cumsum",         "cumprod",     "linalg_solve",
    "linalg_solve_triangular", "linalg_det", "linalg_slogdet", "linalg_cholesky", "linalg_eigh", "linalg_qr",
    "linalg_svd"};
static const char * const widest_ops[] = {"scatter_add", "index_add"};

static uint8_t        policy[TIDE_OP_COUNT_];
static pthread_once_t policy_once = PTHREAD_ONCE_INIT;

static void mark(const char * const * names, size_t n, uint8_t kind) {
    for (size_t i = 0; i < n; i++) {
        int32_t op = tide_op_find(names[i]);
        if (op >= 0) policy[op] = kind;
    }
}

static void init_policy(void) {
    mark(low_ops, sizeof low_ops / sizeof *low_ops, LOW);
    mark(f32_ops, sizeof f32_ops / sizeof *f32_ops, F32);
    mark(widest_ops, sizeof widest_ops / sizeof *widest_ops, WIDEST);
}

int32_t tide_autocast_set(int32_t device_type, int32_t dtype) {
    if (device_type != TIDE_DEVICE_CPU && device_type != TIDE_DEVICE_CUDA) {
        tide_error_set(TIDE_E_DEVICE, "autocast: unknown device type %d", device_type);
        return -2;
    }
    if (dtype != -1 && dtype != TIDE_DTYPE_F16 && dtype != TIDE_DTYPE_BF16) {
        tide_error_set(TIDE_E_DTYPE, "autocast: the low-precision dtype must be float16 or bfloat16, got %s",
                       dtype >= 0 && dtype < TIDE_DTYPE_COUNT ? tide_dtype_name(dtype) : "an unknown dtype");
        return -2;
    }
    pthread_once(&policy_once, init_policy);
    int32_t prev = autocast_dtype[device_type];
    autocast_dtype[device_type] = dtype;
    tide_autocast_on += (dtype >= 0) - (prev >= 0);
    if (tide_autocast_on == 0) tide_autocast_clear_cache();
    return prev;
}

int32_t tide_autocast_get(int32_t device_type) {
    return device_type == TIDE_DEVICE_CPU || device_type == TIDE_DEVICE_CUDA ? autocast_dtype[device_type] : -1;
}

tide_autocast_state tide_autocast_suspend(void) {
    tide_autocast_state s = {{autocast_dtype[0], autocast_dtype[1]}, tide_autocast_on};
    autocast_dtype[0] = autocast_dtype[1] = -1;
    tide_autocast_on = 0;
    return s;
}

void tide_autocast_resume(tide_autocast_state s) {
    autocast_dtype[0] = s.dtype[0], autocast_dtype[1] = s.dtype[1];
    tide_autocast_on = s.on;
}

/* -- the cache of cast weights ---------------------------------------------------------------- */

enum { CACHE_MAX = 256 };
typedef struct {
    tide_tensor * src;   /* retained, so its address is not reused while the entry lives */
    tide_tensor * cast;
    int32_t       version, dtype;
} cache_entry;
static _Thread_local cache_entry cache[CACHE_MAX];
static _Thread_local int32_t     n_cached;

void tide_autocast_clear_cache(void) {
    for (int32_t i = 0; i < n_cached; i++) {
        tide_tensor_release(cache[i].cast);
        tide_tensor_release(cache[i].src);
    }
    n_cached = 0;
}

static bool cacheable(const tide_tensor * t) {
    return !tide_capture && !t->ag_node && (t->flags & TIDE_TENSOR_REQUIRES_GRAD) && !tide_grad_off;
}

/* t cast to dtype (+1), from the cache where t is a weight cast before. */
static tide_tensor * cast(tide_tensor * t, int32_t dtype) {
    bool          keep    = cacheable(t);
    int32_t       version = keep ? atomic_load_explicit(&t->storage->version, memory_order_relaxed) : 0;
    cache_entry * slot    = NULL;
    for (int32_t i = 0; keep && i < n_cached && !slot; i++)
        if (cache[i].src == t && cache[i].dtype == dtype) slot = &cache[i];
    if (slot && slot->version == version) {
        tide_tensor_retain(slot->cast);
        return slot->cast;
    }
    tide_op_params p;
    memset(&p, 0, sizeof p);
    p.dtype = dtype;
    tide_tensor * res[TIDE_OP_MAX_OUT] = {0};
    if (tide_op_call(TIDE_OP_copy, &t, 1, &p, res, NULL) != TIDE_OK) return NULL;
    if (slot) {   /* written since (an optimizer's step): the new cast replaces the old */
        tide_tensor_release(slot->cast);
        tide_tensor_retain(res[0]);
        slot->cast = res[0], slot->version = version;
    } else if (keep && n_cached < CACHE_MAX) {
        tide_tensor_retain(t), tide_tensor_retain(res[0]);
        cache[n_cached++] = (cache_entry){t, res[0], version, dtype};
    }
    return res[0];
}

static bool eligible(const tide_tensor * t, tide_device dev) {
    int32_t d = t->dtype_id;
    return !(t->flags & TIDE_TENSOR_WRAPPED_NUMBER) && t->dev.type == dev.type &&
           (d == TIDE_DTYPE_F32 || d == TIDE_DTYPE_F16 || d == TIDE_DTYPE_BF16);
}

/* The float dtype of widest range among the eligible inputs (float32 over the halves). */
static int32_t widest(tide_tensor * const * in, int32_t n, tide_device dev) {
    int32_t w = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!eligible(in[i], dev)) continue;
        if (w < 0 || in[i]->dtype_id == TIDE_DTYPE_F32) w = in[i]->dtype_id;
    }
    return w;
}

int32_t tide_autocast_inputs(int32_t op, tide_tensor * const * in, int32_t n_in, tide_tensor ** out) {
    if (op < 0 || op >= TIDE_OP_COUNT_ || !policy[op] || n_in < 1) return 0;
    const tide_tensor * ref = NULL;
    for (int32_t i = 0; i < n_in && !ref; i++)
        if (in[i] && !(in[i]->flags & TIDE_TENSOR_WRAPPED_NUMBER)) ref = in[i];
    if (!ref || ref->dev.type < 0 || ref->dev.type > 1 || autocast_dtype[ref->dev.type] < 0) return 0;
    tide_device dev    = ref->dev;
    int32_t     target = policy[op] == LOW ? autocast_dtype[dev.type]
                       : policy[op] == F32 ? TIDE_DTYPE_F32
                                           : widest(in, n_in, dev);
    int32_t n = 0;
    for (int32_t i = 0; i < n_in; i++) {
        out[i] = NULL;
        if (!in[i] || !eligible(in[i], dev) || in[i]->dtype_id == target) continue;
        if (!(out[i] = cast(in[i], target))) {
            for (int32_t j = 0; j < i; j++) tide_tensor_release(out[j]);
            return -1;
        }
        n++;
    }
    return n;
}
