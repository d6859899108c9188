/*
 * backend.cu - libtide_cuda, Tide's CUDA backend, built only where CMake finds
 * the CUDA toolkit and loaded by libtide at run time (engine/cuda_loader.c),
 * so that one libtide runs with or without a GPU and its driver. It exports
 * one symbol, the table of engine/device.h over the CUDA runtime: devices,
 * memory, streams, events, host callbacks, copies and pinned memory, and the
 * op kernels, which live beside this file (one list per file, common.cuh),
 * except those on cuDNN: libtide_cudnn.so (runtime/src/cudnn/), loaded on
 * first need so that this library runs where cuDNN is missing. Caching,
 * ordering and policy are libtide's.
 */
#include "common.cuh"
#include "cudnn/cudnn_kernels.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace tide_cuda {

namespace {
thread_local char last_error[512];
}

int set_error(int code, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

/* Maps a CUDA result to the table's codes, keeping the message. */
int fail(cudaError_t err, const char * what) {
    if (err == cudaSuccess) return TIDE_DEVAPI_OK;
    snprintf(last_error, sizeof last_error, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();   /* an allocation failure is not sticky: clear it */
        return TIDE_DEVAPI_OOM;
    }
    return TIDE_DEVAPI_ERROR;
}

/* Makes `dev` current on this thread: every call names its device. */
int use(int32_t dev) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == dev) return TIDE_DEVAPI_OK;
    return fail(cudaSetDevice(dev), "cudaSetDevice");
}

int launched(const tide_devcall * c) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) return TIDE_DEVAPI_OK;
    return set_error(TIDE_DEVAPI_ERROR, "launching the %s kernel failed: %s (%s)", c->op, cudaGetErrorString(err),
                     cudaGetErrorName(err));
}

int checked(const tide_devcall * c, cudaError_t err, const char * what) {
    if (err == cudaSuccess) return TIDE_DEVAPI_OK;
    cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
        return set_error(TIDE_DEVAPI_OOM, "%s: %s: out of device memory", c->op, what);
    return set_error(TIDE_DEVAPI_ERROR, "%s: %s failed: %s (%s)", c->op, what, cudaGetErrorString(err),
                     cudaGetErrorName(err));
}

int no_dtype(const tide_devcall * c, int32_t dtype) {
    static const char * const names[] = {"float32", "float64", "int32",   "int64",
                                         "uint8",   "bool",    "float16", "bfloat16"};
    return set_error(TIDE_DEVAPI_ERROR, "the CUDA %s kernel has no instance for dtype %s", c->op,
                     dtype >= 0 && dtype < TIDE_DTYPE_COUNT ? names[dtype] : "?");
}

}   // namespace tide_cuda

namespace {

using namespace tide_cuda;

enum { TIDE_PEER_MAX = 16 };   /* libtide's TIDE_MAX_CUDA_DEVICES */

int32_t probe(char * reason, size_t n) {
    int         count = 0;
    cudaError_t err   = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(reason, n, "the CUDA runtime found no usable device: %s (%s)", cudaGetErrorString(err),
                 cudaGetErrorName(err));
        return 0;
    }
    if (count == 0) {
        snprintf(reason, n, "the CUDA runtime found no device");
        return 0;
    }
    size_t used = (size_t)snprintf(reason, n, "%d device%s:", count, count > 1 ? "s" : "");
    for (int i = 0; i < count && used < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        used += (size_t)snprintf(reason + used, n - used, " cuda:%d %s (sm_%d%d, %.0f GiB)", i, p.name, p.major,
                                 p.minor, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    }
    return count;
}

const char * error_text() { return last_error; }

int mem_alloc(int32_t dev, size_t nbytes, void ** out) {
    if (int rc = use(dev)) return rc;
    return fail(cudaMalloc(out, nbytes), "cudaMalloc");
}

int mem_free(int32_t dev, void * p) {
    if (int rc = use(dev)) return rc;
    return fail(cudaFree(p), "cudaFree");
}

int mem_info(int32_t dev, size_t * free_bytes, size_t * total_bytes) {
    if (int rc = use(dev)) return rc;
    return fail(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

int stream_create(int32_t dev, void ** out) {
    if (int rc = use(dev)) return rc;
    cudaStream_t s;
    /* non-blocking: no implicit order with the legacy default stream, which
     * a host library in the same process may use */
    int rc = fail(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    if (rc == TIDE_DEVAPI_OK) *out = s;
    return rc;
}

int stream_destroy(int32_t dev, void * stream) {
    if (int rc = use(dev)) return rc;
    return fail(cudaStreamDestroy((cudaStream_t)stream), "cudaStreamDestroy");
}

int stream_sync(int32_t dev, void * stream) {
    if (int rc = use(dev)) return rc;
    return fail(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

int event_create(int32_t dev, void ** out) {
    if (int rc = use(dev)) return rc;
    cudaEvent_t e;
    /* no timing: cheaper to record and to wait on */
    int rc = fail(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    if (rc == TIDE_DEVAPI_OK) *out = e;
    return rc;
}

int event_destroy(int32_t dev, void * event) {
    if (int rc = use(dev)) return rc;
    return fail(cudaEventDestroy((cudaEvent_t)event), "cudaEventDestroy");
}

int event_record(int32_t dev, void * event, void * stream) {
    if (int rc = use(dev)) return rc;
    return fail(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream), "cudaEventRecord");
}

int event_query(int32_t dev, void * event) {
    if (use(dev)) return -1;
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);
    if (err == cudaSuccess) return 1;
    if (err == cudaErrorNotReady) {
        cudaGetLastError();   /* "not ready" is an answer, not an error to keep */
        return 0;
    }
    fail(err, "cudaEventQuery");
    return -1;
}

int event_sync(int32_t dev, void * event) {
    if (int rc = use(dev)) return rc;
    return fail(cudaEventSynchronize((cudaEvent_t)event), "cudaEventSynchronize");
}

int stream_wait_event(int32_t dev, void * stream, void * event) {
    if (int rc = use(dev)) return rc;
    return fail(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
}

int host_callback(int32_t dev, void * stream, void (*fn)(void *), void * arg) {
    if (int rc = use(dev)) return rc;
    return fail(cudaLaunchHostFunc((cudaStream_t)stream, fn, arg), "cudaLaunchHostFunc");
}

int copy_async(int32_t dev, void * dst, const void * src, size_t nbytes, int32_t kind, void * stream) {
    if (int rc = use(dev)) return rc;
    cudaMemcpyKind k = kind == TIDE_COPY_H2D   ? cudaMemcpyHostToDevice
                       : kind == TIDE_COPY_D2H ? cudaMemcpyDeviceToHost
                                               : cudaMemcpyDeviceToDevice;
    return fail(cudaMemcpyAsync(dst, src, nbytes, k, (cudaStream_t)stream), "cudaMemcpyAsync");
}

/* Peer access is turned on once per ordered pair of devices, where the
 * hardware has it; without it cudaMemcpyPeerAsync goes through the host. */
pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
signed char     peer_state[TIDE_PEER_MAX][TIDE_PEER_MAX];   /* 0 unknown, 1 on, -1 not available */

void enable_peer(int32_t dst, int32_t src) {
    if (dst == src || dst >= TIDE_PEER_MAX || src >= TIDE_PEER_MAX) return;
    pthread_mutex_lock(&peer_lock);
    if (peer_state[dst][src] == 0) {
        int can = 0;
        peer_state[dst][src] = -1;
        if (cudaDeviceCanAccessPeer(&can, dst, src) == cudaSuccess && can && cudaSetDevice(dst) == cudaSuccess) {
            cudaError_t err = cudaDeviceEnablePeerAccess(src, 0);
            if (err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled) peer_state[dst][src] = 1;
            (void)cudaGetLastError();   /* a refusal is not an error of later work */
        }
    }
    pthread_mutex_unlock(&peer_lock);
}

int copy_peer(int32_t dst_dev, void * dst, int32_t src_dev, const void * src, size_t nbytes, void * stream) {
    enable_peer(dst_dev, src_dev);
    if (int rc = use(dst_dev)) return rc;
    return fail(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, nbytes, (cudaStream_t)stream), "cudaMemcpyPeerAsync");
}

/* Relaxed: a kernel recorded may still allocate (the caching allocator
 * grows with cudaMalloc), and other threads keep their own streams going. */
int capture_begin(int32_t dev, void * stream) {
    if (int rc = use(dev)) return rc;
    return fail(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
}

int capture_end(int32_t dev, void * stream, void ** graph) {
    *graph = nullptr;
    if (int rc = use(dev)) return rc;
    cudaGraph_t g   = nullptr;
    cudaError_t err = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (err != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return fail(err, "cudaStreamEndCapture");
    }
    cudaGraphExec_t x = nullptr;
    err = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);   /* the executable graph is a copy */
    if (err != cudaSuccess) return fail(err, "cudaGraphInstantiate");
    *graph = x;
    return TIDE_DEVAPI_OK;
}

int graph_launch(int32_t dev, void * graph, void * stream) {
    if (int rc = use(dev)) return rc;
    return fail(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream), "cudaGraphLaunch");
}

int graph_destroy(int32_t dev, void * graph) {
    if (int rc = use(dev)) return rc;
    return fail(cudaGraphExecDestroy((cudaGraphExec_t)graph), "cudaGraphExecDestroy");
}

int pinned_alloc(size_t nbytes, void ** out) {
    /* portable: usable by every device's streams, not only the current one's */
    return fail(cudaHostAlloc(out, nbytes, cudaHostAllocPortable), "cudaHostAlloc");
}

int pinned_free(void * p) { return fail(cudaFreeHost(p), "cudaFreeHost"); }

/* Every kernel file's list (common.cuh). */
const kernel_entry * const kernel_lists[] = {ew_kernels,     reduce_kernels, blas_kernels,
                                               random_kernels, index_kernels,  pool_kernels};

/* This library's own kernel of op, or NULL. */
tide_devkernel_fn own_kernel(const char * op) {
    for (const kernel_entry * list : kernel_lists)
        for (const kernel_entry * k = list; k->name; k++)
            if (strcmp(k->name, op) == 0) return k->fn;
    return nullptr;
}

/* -- the cuDNN kernels: libtide_cudnn.so (runtime/src/cudnn/), beside this library -- */

/* Loaded the first time a name is not in the lists above, so that this
 * library loads and runs where cuDNN is missing; kept for the process once
 * loaded (its kernels may be running). */
pthread_once_t           cudnn_once = PTHREAD_ONCE_INIT;
const tide_cudnn_table * cudnn_table;
char                     cudnn_why[5120];   /* why it is not there, once tried: room for a path and a message */

const tide_cudnn_hooks cudnn_hooks = {TIDE_CUDNN_VERSION, TIDE_DEVAPI_VERSION, set_error, use, own_kernel};

void load_cudnn() {
    char    path[4096];
    Dl_info info;   /* the folder this library was loaded from */
    if (dladdr((void *)own_kernel, &info) && info.dli_fname && strrchr(info.dli_fname, '/')) {
        snprintf(path, sizeof path, "%s", info.dli_fname);
        char * slash = strrchr(path, '/');
        snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s", TIDE_CUDNN_LIBRARY);
    } else {
        snprintf(path, sizeof path, "%s", TIDE_CUDNN_LIBRARY);   /* the loader's search path */
    }
    void * lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char * e = dlerror();
        snprintf(cudnn_why, sizeof cudnn_why, "%s", e ? e : path);
        return;
    }
    tide_cudnn_kernels_fn get = (tide_cudnn_kernels_fn)dlsym(lib, TIDE_CUDNN_SYMBOL);
    const tide_cudnn_table * t = get ? get(TIDE_CUDNN_VERSION, &cudnn_hooks) : nullptr;
    if (!t || t->version != TIDE_CUDNN_VERSION) {
        if (get) snprintf(cudnn_why, sizeof cudnn_why, "%s was built for another version of libtide_cuda", path);
        else snprintf(cudnn_why, sizeof cudnn_why, "%s has no %s", path, TIDE_CUDNN_SYMBOL);
        dlclose(lib);   /* nothing of it was used */
        return;
    }
    cudnn_table = t;
}

/* Looks in this library's lists, then in libtide_cudnn's. With NULL,
 * error_text on the calling thread says why: no such kernel, or libtide_cudnn
 * could not be loaded and why. */
tide_devkernel_fn kernel(const char * op) {
    if (tide_devkernel_fn fn = own_kernel(op)) return fn;
    pthread_once(&cudnn_once, load_cudnn);
    if (!cudnn_table) {
        set_error(TIDE_DEVAPI_ERROR, "%s: cuDNN is not available (%s)", op, cudnn_why);
        return nullptr;
    }
    tide_devkernel_fn fn = cudnn_table->kernel(op);
    if (!fn) set_error(TIDE_DEVAPI_ERROR, "%s: neither libtide_cuda nor libtide_cudnn has a kernel for it", op);
    return fn;
}

const tide_devapi table = {
    TIDE_DEVAPI_VERSION,
    "cuda",
    probe,
    error_text,
    mem_alloc,
    mem_free,
    mem_info,
    stream_create,
    stream_destroy,
    stream_sync,
    event_create,
    event_destroy,
    event_record,
    event_query,
    event_sync,
    stream_wait_event,
    host_callback,
    copy_async,
    pinned_alloc,
    pinned_free,
    kernel,
    copy_peer,
    capture_begin,
    capture_end,
    graph_launch,
    graph_destroy,
};

}   // namespace

extern "C" __attribute__((visibility("default"))) const tide_devapi * tide_cuda_backend_api(int32_t version) {
    return version == TIDE_DEVAPI_VERSION ? &table : nullptr;
}
