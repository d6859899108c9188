/*
 * cudnn_kernels.h - what libtide_cuda (runtime/src/cuda/backend.cu) and
 * libtide_cudnn (conv.cpp beside this file, the kernels that run on cuDNN)
 * give each other. libtide_cudnn is a library of its own so that libtide_cuda
 * still loads where the NVIDIA driver is but cuDNN is not: libtide_cuda loads
 * it the first time it is asked for a kernel its own lists lack, hands it the
 * hooks below and looks names up in the table it gets back. Plain C, so that
 * nvcc and the host compiler read it alike.
 */
#ifndef TIDE_CUDNN_KERNELS_H
#define TIDE_CUDNN_KERNELS_H

#include "engine/device.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the hooks or the table change. */
enum { TIDE_CUDNN_VERSION = 1 };

/* What libtide_cudnn needs from libtide_cuda. Lives as long as the process:
 * libtide_cudnn keeps the pointer. */
typedef struct tide_cudnn_hooks {
    int32_t version;          /* TIDE_CUDNN_VERSION */
    int32_t devapi_version;   /* TIDE_DEVAPI_VERSION of libtide_cuda: the layout of tide_devcall */
    /* Keeps a message for libtide_cuda's error_text on the calling thread; returns `code`. */
    int (*set_error)(int code, const char * fmt, ...);
    /* Makes device `dev` current on the calling thread (before a cuDNN handle is made for it). */
    int (*use)(int32_t dev);
    /* libtide_cuda's own kernel of a registry op, or NULL: libtide_cudnn calls
     * "copy" (packing operands, zero fills) and "add" (the bias) with calls it
     * derives from its own, on the same stream. */
    tide_devkernel_fn (*kernel)(const char * op);
} tide_cudnn_hooks;

/* What libtide_cudnn gives back. */
typedef struct tide_cudnn_table {
    int32_t version;          /* TIDE_CUDNN_VERSION */
    /* The kernel of the registry op named `op`, or NULL when it has none. */
    tide_devkernel_fn (*kernel)(const char * op);
} tide_cudnn_table;

/* The one symbol libtide_cudnn exports (TIDE_CUDNN_SYMBOL): its table, or
 * NULL when `version` or hooks->devapi_version is not the one it was built for. */
typedef const tide_cudnn_table * (*tide_cudnn_kernels_fn)(int32_t version, const tide_cudnn_hooks * hooks);

#define TIDE_CUDNN_SYMBOL "tide_cudnn_kernels"
#define TIDE_CUDNN_LIBRARY "libtide_cudnn.so"

#ifdef __cplusplus
}
#endif

#endif
