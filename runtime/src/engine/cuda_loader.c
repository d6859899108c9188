/*
 * cuda_loader.c - finds Tide's CUDA backend (libtide_cuda.so, beside libtide
 * or named by TIDE_CUDA_LIBRARY) the first time CUDA is asked about, and keeps
 * the answer: the backend's function table (device.h) and how many devices,
 * or why there are none (no backend in this build, no driver, no device).
 * It owns one caching allocator per device (devalloc.c). The backend itself
 * is runtime/src/cuda/.
 */
#include "cuda_loader.h"
#include "transfer.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_once_t      once = PTHREAD_ONCE_INIT;
static const tide_devapi * api;
static int32_t             n_devices;
static char                status[5120];   /* room for a path and a message */
static pthread_mutex_t     alloc_lock = PTHREAD_MUTEX_INITIALIZER;
/* Made on first use under alloc_lock, then read without it: every device
 * storage's allocation and release asks for them. */
static _Atomic(tide_devalloc *) allocs[TIDE_MAX_CUDA_DEVICES];
/* each device's streams: TIDE_STREAM_COMPUTE, TIDE_STREAM_COPY (copies from the host) */
static _Atomic(void *)          streams[TIDE_MAX_CUDA_DEVICES][TIDE_STREAMS];
/* an event per device and stream, recorded there for the other stream to wait on */
static _Atomic(void *)          marks[TIDE_MAX_CUDA_DEVICES][TIDE_STREAMS];
static atomic_int               allow_tf32;
/* Each op's kernel as the backend gave it: 0 not asked yet, 1 none, else the function. */
static _Atomic(uintptr_t)       kernels[TIDE_OP_COUNT_];

/* Asks the backend how many devices it sees, and keeps it when it sees some. */
static void take(const tide_devapi * t) {
    char reason[4096];
    reason[0] = 0;
    int32_t n = t->probe(reason, sizeof reason);
    if (n <= 0) {
        snprintf(status, sizeof status, "CUDA is not available: %s", reason);
        return;
    }
    api       = t;
    n_devices = n < TIDE_MAX_CUDA_DEVICES ? n : TIDE_MAX_CUDA_DEVICES;
    snprintf(status, sizeof status, "%s", reason);
}

static void probe(void) {
    char         path[4096];
    const char * env = getenv("TIDE_CUDA_LIBRARY");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        Dl_info info;   /* beside libtide itself */
        if (!dladdr((void *)tide_cuda_device_count, &info) || !info.dli_fname) {
            snprintf(status, sizeof status, "CUDA is not available: cannot locate libtide to find libtide_cuda.so");
            return;
        }
        snprintf(path, sizeof path, "%s", info.dli_fname);
        char * slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0), "libtide_cuda.so");
    }
    void * lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char * e = dlerror();
        if (env && *env)
            snprintf(status, sizeof status, "CUDA is not available: TIDE_CUDA_LIBRARY names a backend that does not "
                     "load (%s)", e ? e : path);
        else
            snprintf(status, sizeof status, "CUDA is not available: this build has no CUDA backend (%s)", e ? e : path);
        return;
    }
    tide_devapi_get_fn get = (tide_devapi_get_fn)dlsym(lib, "tide_cuda_backend_api");
    if (!get) {
        snprintf(status, sizeof status, "CUDA is not available: %s has no tide_cuda_backend_api", path);
        return;
    }
    const tide_devapi * t = get(TIDE_DEVAPI_VERSION);
    if (!t) {
        snprintf(status, sizeof status, "CUDA is not available: %s was built for another version of libtide", path);
        return;
    }
    take(t);
}

void tide_cuda_use_backend(const tide_devapi * t) {
    pthread_once(&once, probe);
    for (int32_t i = 0; i < TIDE_MAX_CUDA_DEVICES; i++) {
        tide_devalloc_free_all(atomic_exchange(&allocs[i], NULL));
        for (int32_t k = 0; k < TIDE_STREAMS; k++) {
            void * ev = atomic_exchange(&marks[i][k], NULL);
            if (ev) api->event_destroy(i, ev);
            void * st = atomic_exchange(&streams[i][k], NULL);
            if (st) api->stream_destroy(i, st);
        }
    }
    for (int32_t i = 0; i < TIDE_OP_COUNT_; i++) atomic_store(&kernels[i], 0);
    tide_cuda_free_reports();
    tide_transfer_free_staging();
    api       = NULL;
    n_devices = 0;
    if (t) take(t);
    else snprintf(status, sizeof status, "CUDA is not available: the backend was taken out");
}

int32_t tide_cuda_device_count(void) {
    pthread_once(&once, probe);
    return n_devices;
}

const char * tide_cuda_status(void) {
    pthread_once(&once, probe);
    return status;
}

const tide_devapi * tide_cuda_api(void) {
    pthread_once(&once, probe);
    return api;
}

void tide_cuda_set_allow_tf32(int allow) { atomic_store_explicit(&allow_tf32, allow != 0, memory_order_relaxed); }
int  tide_cuda_allow_tf32(void) { return atomic_load_explicit(&allow_tf32, memory_order_relaxed); }

uint32_t tide_cuda_call_flags(void) { return tide_cuda_allow_tf32() ? TIDE_DEVCALL_ALLOW_TF32 : 0; }

/* Why an op has no kernel, as the backend said when it was looked up. */
static char no_kernel_why[TIDE_OP_COUNT_][192];

tide_devkernel_fn tide_cuda_kernel(int32_t op) {
    if (op < 0 || op >= TIDE_OP_COUNT_ || !tide_cuda_api()) return NULL;
    uintptr_t k = atomic_load_explicit(&kernels[op], memory_order_acquire);
    if (!k) {   /* a race here only asks the backend twice */
        tide_devkernel_fn fn = api->kernel(tide_op_name(op));
        if (!fn) {   /* the backend's words, without the op's name it starts with */
            const char * why = api->error_text(), * name = tide_op_name(op);
            size_t       n   = strlen(name);
            if (strncmp(why, name, n) == 0 && why[n] == ':') why += n + 1 + (why[n + 1] == ' ');
            snprintf(no_kernel_why[op], sizeof no_kernel_why[op], "%s", why);
        }
        k = fn ? (uintptr_t)fn : 1;
        atomic_store_explicit(&kernels[op], k, memory_order_release);
    }
    return k == 1 ? NULL : (tide_devkernel_fn)k;
}

const char * tide_cuda_no_kernel_why(int32_t op) {
    return op >= 0 && op < TIDE_OP_COUNT_ && atomic_load(&kernels[op]) == 1 ? no_kernel_why[op] : "";
}

/* cuda:`device` checked against what the backend found; `what` names the caller. */
static tide_status check_device(int32_t device, const char * what) {
    pthread_once(&once, probe);
    if (n_devices == 0) return tide_error_set(TIDE_E_DEVICE, "%s: %s", what, status);
    if (device < 0 || device >= n_devices)
        return tide_error_set(TIDE_E_DEVICE, "%s: there is no device cuda:%d (the CUDA devices are cuda:0 to cuda:%d)",
                              what, device, n_devices - 1);
    return TIDE_OK;
}

/* cuda:`device`'s allocator (a valid device), made on first use; NULL with
 * the error set when there is no host memory for it. */
static tide_devalloc * allocator(int32_t device) {
    tide_devalloc * a = atomic_load_explicit(&allocs[device], memory_order_acquire);
    if (a) return a;
    pthread_mutex_lock(&alloc_lock);
    if (!(a = atomic_load_explicit(&allocs[device], memory_order_relaxed))) {
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", device);
        if ((a = tide_devalloc_new(api, device, name))) atomic_store_explicit(&allocs[device], a, memory_order_release);
        else tide_error_set(TIDE_E_OOM, "cuda:%d: out of host memory for its allocator", device);
    }
    pthread_mutex_unlock(&alloc_lock);
    return a;
}

tide_devalloc * tide_cuda_allocator(int32_t device) {
    return check_device(device, "cuda") == TIDE_OK ? allocator(device) : NULL;
}

void * tide_cuda_stream(int32_t device) { return tide_cuda_stream_of(device, TIDE_STREAM_COMPUTE); }

/* Exit handlers run in the reverse order of their registration, and the
 * CUDA runtime (static in libtide_cuda) registers its teardown when it starts,
 * after libtide registered the engine's drain: at exit it was torn down under
 * queued device ops, whose completion then crashed the process (seen on an
 * H100: a script ending with products queued on cuda:0). Registered again
 * once the runtime has made a stream, the drain runs first. */
static pthread_once_t drain_once = PTHREAD_ONCE_INIT;
static void           drain_before_runtime_exit(void) { atexit(tide_engine_drain_at_exit); }

void * tide_cuda_stream_of(int32_t device, int32_t kind) {
    if (check_device(device, "cuda") != TIDE_OK) return NULL;
    void * s = atomic_load_explicit(&streams[device][kind], memory_order_acquire);
    if (s) return s;
    pthread_mutex_lock(&alloc_lock);
    if (!(s = atomic_load_explicit(&streams[device][kind], memory_order_relaxed))) {
        if (api->stream_create(device, &s) == TIDE_DEVAPI_OK) {
            atomic_store_explicit(&streams[device][kind], s, memory_order_release);
            pthread_once(&drain_once, drain_before_runtime_exit);
        } else {
            s = NULL;
            tide_error_set(TIDE_E_DEVICE, "cuda:%d: could not create a stream: %s", device, api->error_text());
        }
    }
    pthread_mutex_unlock(&alloc_lock);
    return s;
}

tide_status tide_cuda_wait_stream(int32_t device, int32_t waiter, int32_t waited, const char * what) {
    void * mine = tide_cuda_stream_of(device, waiter), * theirs = tide_cuda_stream_of(device, waited);
    if (!mine || !theirs) return tide_last_status();
    void * ev = atomic_load_explicit(&marks[device][waited], memory_order_acquire);
    if (!ev) {
        pthread_mutex_lock(&alloc_lock);
        if (!(ev = atomic_load_explicit(&marks[device][waited], memory_order_relaxed))) {
            if (api->event_create(device, &ev) == TIDE_DEVAPI_OK)
                atomic_store_explicit(&marks[device][waited], ev, memory_order_release);
            else ev = NULL;
        }
        pthread_mutex_unlock(&alloc_lock);
    }
    /* the wait takes the event as recorded at the time it is made: it can be
     * recorded again for the next one */
    if (!ev || api->event_record(device, ev, theirs) != TIDE_DEVAPI_OK ||
        api->stream_wait_event(device, mine, ev) != TIDE_DEVAPI_OK)
        return tide_error_set(TIDE_E_DEVICE, "%s: cuda:%d could not order its two streams: %s", what, device,
                              api->error_text());
    return TIDE_OK;
}

/* cuda:`device`'s allocator for the public call `what`; NULL with the error set. */
static tide_devalloc * allocator_for(int32_t device, const char * what) {
    return check_device(device, what) == TIDE_OK ? allocator(device) : NULL;
}

tide_status tide_cuda_memory_stats(int32_t device, tide_devmem_stats * out) {
    tide_devalloc * a = allocator_for(device, "cuda.memory_stats");
    if (!a) return TIDE_E_DEVICE;
    tide_devalloc_stats(a, out);
    return TIDE_OK;
}

tide_status tide_cuda_device_props(int32_t device, tide_cuda_props * out) {
    if (check_device(device, "cuda.get_device_properties") != TIDE_OK) return TIDE_E_DEVICE;
    memset(out, 0, sizeof *out);
    if (api->device_props(device, out) != TIDE_DEVAPI_OK)
        return tide_error_set(TIDE_E_DEVICE, "cuda.get_device_properties: cuda:%d: %s", device, api->error_text());
    out->name[sizeof out->name - 1] = '\0';
    return TIDE_OK;
}

tide_status tide_cuda_empty_cache(int32_t device) {
    tide_devalloc * a = allocator_for(device, "cuda.empty_cache");
    if (!a) return TIDE_E_DEVICE;
    tide_devalloc_empty_cache(a);
    return TIDE_OK;
}

tide_status tide_cuda_reset_peak(int32_t device) {
    tide_devalloc * a = allocator_for(device, "cuda.reset_peak");
    if (!a) return TIDE_E_DEVICE;
    tide_devalloc_reset_peak(a);
    return TIDE_OK;
}
