/*
 * backend.cu - libtide_cuda, Tide's CUDA backend, built only where CMake finds
 * the CUDA toolkit and loaded by libtide at run time (engine/cuda_loader.c),
 * so that one libtide runs with or without a GPU and its driver. It exports
 * one symbol, the table of engine/device.h over the CUDA runtime: devices,
 * memory, streams, events, host callbacks, copies and pinned memory, and the
 * op kernels, which live beside this file (one list per file, common.cuh),
 * except those on cuDNN: libtide_cudnn.so (runtime/src/cudnn/), loaded on
 * first need so that this library runs where cuDNN is missing; and the
 * kernels libtide writes at run time (a jit plan's fused chains), compiled by
 * NVRTC, likewise opened on first need, and loaded as CUDA libraries.
 * Caching, ordering and policy are libtide's.
 */
#include "common.cuh"
#include "cudnn/cudnn_kernels.h"

#include <dlfcn.h>
#include <nvrtc.h>   /* its types only: libnvrtc is opened at run time (rtc_compile) */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace tide_cuda {

namespace {
thread_local char last_error[4096];   /* room for a compiler's log (rtc_compile) */
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

int need_memory(const tide_devcall * c) {
    for (int32_t i = 0; i < c->n_in; i++)
        if (!c->in[i].data && c->in[i].nelem > 0)
            return set_error(TIDE_DEVAPI_ERROR, "%s: input %d must be a tensor on the device, not a host number", c->op,
                             i + 1);
    return TIDE_DEVAPI_OK;
}

void * open_toolkit_library(const char * stem, int major, char * why, size_t why_size) {
    char versioned[64], plain[64];
    snprintf(versioned, sizeof versioned, "%s.so.%d", stem, major);
    snprintf(plain, sizeof plain, "%s.so", stem);
    const char * const names[] = {versioned, plain};
    for (const char * name : names) {
        const char * tries[2] = {name, nullptr};
#ifdef TIDE_CUDA_LIBRARY_DIR
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", TIDE_CUDA_LIBRARY_DIR, name);
        tries[1] = path;
#endif
        for (const char * t : tries) {
            if (!t) continue;
            if (void * lib = dlopen(t, RTLD_NOW | RTLD_LOCAL)) return lib;
            const char * e = dlerror();
            if (!why[0]) snprintf(why, why_size, "%s", e ? e : t);
        }
    }
    return nullptr;
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
                                               random_kernels, index_kernels,  pool_kernels,
                                               sort_kernels,   linalg_kernels};

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

/* -- kernels compiled at run time: NVRTC, opened on first need -- */

/* libnvrtc is opened, not linked, so that this library loads and runs where
 * the runtime compiler is missing (it is large, and not in every install);
 * kept for the process once opened. */
struct nvrtc_api {
    decltype(&nvrtcCreateProgram)     create_program;
    decltype(&nvrtcCompileProgram)    compile_program;
    decltype(&nvrtcGetProgramLogSize) program_log_size;
    decltype(&nvrtcGetProgramLog)     program_log;
    decltype(&nvrtcGetCUBINSize)      cubin_size;
    decltype(&nvrtcGetCUBIN)          cubin;
    decltype(&nvrtcDestroyProgram)    destroy_program;
    decltype(&nvrtcGetErrorString)    error_string;
    decltype(&nvrtcVersion)           version;
};

pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
nvrtc_api      nvrtc;
bool           nvrtc_loaded;
int            nvrtc_major, nvrtc_minor;
char           nvrtc_why[1024];   /* why it is not there, once tried */

template <typename F> bool resolve(void * lib, F & fn, const char * symbol) {
    fn = (F)dlsym(lib, symbol);
    if (!fn) snprintf(nvrtc_why, sizeof nvrtc_why, "libnvrtc has no %s", symbol);
    return fn != nullptr;
}

/* The major version this library was built with first: its options and
 * output are those we know. */
void * open_nvrtc() { return open_toolkit_library("libnvrtc", CUDART_VERSION / 1000, nvrtc_why, sizeof nvrtc_why); }

void load_nvrtc() {
    void * lib = open_nvrtc();
    if (!lib) return;
    nvrtc_api a;
    bool ok = resolve(lib, a.create_program, "nvrtcCreateProgram") &&
              resolve(lib, a.compile_program, "nvrtcCompileProgram") &&
              resolve(lib, a.program_log_size, "nvrtcGetProgramLogSize") &&
              resolve(lib, a.program_log, "nvrtcGetProgramLog") &&
              resolve(lib, a.cubin_size, "nvrtcGetCUBINSize") &&
              resolve(lib, a.cubin, "nvrtcGetCUBIN") &&
              resolve(lib, a.destroy_program, "nvrtcDestroyProgram") &&
              resolve(lib, a.error_string, "nvrtcGetErrorString") &&
              resolve(lib, a.version, "nvrtcVersion");
    if (!ok) {
        dlclose(lib);   /* nothing of it was used */
        return;
    }
    if (a.version(&nvrtc_major, &nvrtc_minor) != NVRTC_SUCCESS) nvrtc_major = nvrtc_minor = 0;
    nvrtc        = a;
    nvrtc_loaded = true;
}

/* The compiler's log, its trailing newlines dropped; malloc'd, or NULL. */
char * program_log(nvrtcProgram prog) {
    size_t n = 0;
    if (nvrtc.program_log_size(prog, &n) != NVRTC_SUCCESS || n == 0) return nullptr;
    char * log = (char *)malloc(n);
    if (!log) return nullptr;
    if (nvrtc.program_log(prog, log) != NVRTC_SUCCESS) {
        free(log);
        return nullptr;
    }
    log[n - 1] = '\0';
    size_t len = strlen(log);
    while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == '\r')) log[--len] = '\0';
    return log;
}

/* *out: the program's machine code for dev, malloc'd; NULL on an error. */
int compile(int32_t dev, const char * src, const char * name, char ** out) {
    *out      = nullptr;
    int major = 0, minor = 0;
    cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess) return fail(err, "cudaDeviceGetAttribute");
    /* Straight to the device's own machine code (no PTX to JIT at load);
     * no fused multiply-adds: each operation rounds as its own kernel's does. */
    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char * const options[] = {arch, "--fmad=false", "--std=c++17"};

    nvrtcProgram prog = nullptr;
    nvrtcResult  r    = nvrtc.create_program(&prog, src, name, 0, nullptr, nullptr);
    if (r != NVRTC_SUCCESS)
        return set_error(TIDE_DEVAPI_ERROR, "compiling the kernel %s: nvrtcCreateProgram failed: %s", name,
                         nvrtc.error_string(r));
    int    rc    = TIDE_DEVAPI_OK;
    char * cubin = nullptr;
    size_t size  = 0;
    r = nvrtc.compile_program(prog, (int)(sizeof options / sizeof options[0]), options);
    if (r == NVRTC_SUCCESS) r = nvrtc.cubin_size(prog, &size);
    if (r == NVRTC_SUCCESS) {
        cubin = (char *)malloc(size ? size : 1);
        if (!cubin) {
            rc = set_error(TIDE_DEVAPI_OOM, "compiling the kernel %s: no host memory for its %zu bytes of code", name,
                           size);
        } else if ((r = nvrtc.cubin(prog, cubin)) != NVRTC_SUCCESS) {
            free(cubin);
            cubin = nullptr;
        }
    }
    if (r != NVRTC_SUCCESS) {   /* the log says why; what does not fit in last_error is cut */
        char * log = program_log(prog);
        rc = set_error(TIDE_DEVAPI_ERROR, "compiling the kernel %s for sm_%d%d failed: %s (NVRTC %d.%d)%s%s", name,
                       major, minor, nvrtc.error_string(r), nvrtc_major, nvrtc_minor, log && log[0] ? ":\n" : "",
                       log ? log : "");
        free(log);
    }
    nvrtc.destroy_program(&prog);
    *out = cubin;
    return rc;
}

int rtc_compile(int32_t dev, const char * src, const char * name, void ** fn) {
    *fn = nullptr;
    if (int rc = use(dev)) return rc;
    pthread_once(&nvrtc_once, load_nvrtc);
    if (!nvrtc_loaded)
        return set_error(TIDE_DEVAPI_ERROR, "the CUDA runtime compiler (libnvrtc) is not available: %s", nvrtc_why);
    char * cubin = nullptr;
    if (int rc = compile(dev, src, name, &cubin)) return rc;
    /* A library, not a module: loaded into every device's context as it
     * needs it, and kept for the process (one per fused chain of a plan: few).
     * The driver keeps its own copy of the code. */
    cudaLibrary_t lib = nullptr;
    cudaError_t   err = cudaLibraryLoadData(&lib, cubin, nullptr, nullptr, 0, nullptr, nullptr, 0);
    free(cubin);
    if (err != cudaSuccess) return fail(err, "cudaLibraryLoadData");
    cudaKernel_t kernel = nullptr;
    err                 = cudaLibraryGetKernel(&kernel, lib, name);
    if (err != cudaSuccess) {
        (void)cudaLibraryUnload(lib);
        char what[160];
        snprintf(what, sizeof what, "cudaLibraryGetKernel(%s)", name);
        return fail(err, what);
    }
    /* Loads it on dev now, where lazy loading would at its first launch
     * (maybe while a graph records), and finds a kernel that cannot run
     * there here rather than at a launch. */
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, (const void *)kernel);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaLibraryUnload(lib);
        return fail(err, "cudaFuncGetAttributes");
    }
    *fn = (void *)kernel;
    return TIDE_DEVAPI_OK;
}

/* fn is a cudaKernel_t, which cudaLaunchKernel takes in place of a
 * __global__ function's address. */
int rtc_launch(int32_t dev, void * fn, const void * arg, size_t nbytes, int64_t n, void * stream) {
    (void)nbytes;   /* the kernel knows its parameter's size */
    if (int rc = use(dev)) return rc;
    void *      args[1] = {(void *)arg};
    cudaError_t err     = cudaLaunchKernel((const void *)fn, dim3(blocks_for(n)), dim3(THREADS), args, 0,
                                           (cudaStream_t)stream);
    if (err == cudaSuccess) return TIDE_DEVAPI_OK;
    (void)cudaGetLastError();   /* a refused launch is not an error of later work */
    return fail(err, "cudaLaunchKernel");
}

int device_props(int32_t dev, tide_cuda_props * out) {
    cudaDeviceProp p;
    if (int rc = fail(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties")) return rc;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->major            = p.major;
    out->minor            = p.minor;
    out->multi_processors = p.multiProcessorCount;
    out->total_bytes      = (int64_t)p.totalGlobalMem;
    return TIDE_DEVAPI_OK;
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
    rtc_compile,
    rtc_launch,
    device_props,
};

}   // namespace

extern "C" __attribute__((visibility("default"))) const tide_devapi * tide_cuda_backend_api(int32_t version) {
    return version == TIDE_DEVAPI_VERSION ? &table : nullptr;
}
