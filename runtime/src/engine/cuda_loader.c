/*
 * cuda_loader.c - finds Tide's CUDA backend (libtide_cuda.so, beside libtide
 * or named by TIDE_CUDA_LIBRARY) the first time CUDA is asked about, and keeps
 * the answer: how many devices, or why there are none (no backend in this
 * build, no driver, no device). The backend itself is runtime/src/cuda/.
 */
#include "../core/internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int32_t        n_devices;
static char           status[5120];   /* room for a path and a message */

static void probe(void) {
    char        path[4096];
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
        snprintf(status, sizeof status, "CUDA is not available: this build has no CUDA backend (%s)", dlerror());
        return;
    }
    int32_t (*backend_probe)(char *, size_t) = (int32_t (*)(char *, size_t))dlsym(lib, "tide_cuda_backend_probe");
    if (!backend_probe) {
        snprintf(status, sizeof status, "CUDA is not available: %s has no tide_cuda_backend_probe", path);
        return;
    }
    char reason[4096];
    reason[0] = 0;
    n_devices = backend_probe(reason, sizeof reason);
    if (n_devices > 0) snprintf(status, sizeof status, "%s", reason);
    else snprintf(status, sizeof status, "CUDA is not available: %s", reason);
}

int32_t tide_cuda_device_count(void) {
    pthread_once(&once, probe);
    return n_devices;
}

const char * tide_cuda_status(void) {
    pthread_once(&once, probe);
    return status;
}
