/*
 * cuda_loader.h - the CUDA backend as the rest of libtide sees it: its
 * function table (device.h) once loaded, and each device's caching allocator.
 */
#ifndef TIDE_CUDA_LOADER_H
#define TIDE_CUDA_LOADER_H

#include "devalloc.h"

/* CUDA devices Tide uses at most (more are left out of tide_cuda_device_count). */
enum { TIDE_MAX_CUDA_DEVICES = 16 };

/* The loaded backend's table, or NULL when CUDA is not available here
 * (tide_cuda_status says why). */
TIDE_INTERNAL const tide_devapi * tide_cuda_api(void);
/* cuda:`device`'s allocator, made on first use; NULL with TIDE_E_DEVICE set
 * when there is no such device. */
TIDE_INTERNAL tide_devalloc *     tide_cuda_allocator(int32_t device);
/* cuda:`device`'s compute stream, made on first use: the device's engine
 * queue runs its ops on it, and its storages are allocated for it. NULL with
 * TIDE_E_DEVICE set when there is no such device or no stream could be made. */
TIDE_INTERNAL void *              tide_cuda_stream(int32_t device);
/* Replaces the backend with `t` (NULL: none), dropping the allocators: for
 * tests, which drive the CUDA paths with a fake backend on the host. Not
 * thread-safe: call it while no other thread uses CUDA. */
TIDE_INTERNAL void                tide_cuda_use_backend(const tide_devapi * t);

#endif
