/*
 * fuse_cuda.h - fused elementwise chains on CUDA devices (fuse_cuda.c): which
 * ops and dtypes have a fused CUDA form, the kernel's source, its compilation
 * through the backend's runtime compiler, and its launch.
 */
#ifndef TIDE_FUSE_CUDA_H
#define TIDE_FUSE_CUDA_H

#include "../core/internal.h"
#include "../ops/cpu/kernels.h"

/* The name of the kernel in every fused chain's source (each is a module of its own). */
#define TIDE_FUSE_CUDA_KERNEL "tide_fused"

/* Whether op can be a step of a fused CUDA kernel. */
TIDE_INTERNAL bool        tide_fuse_cuda_op(int32_t op);
/* Writes into buf the CUDA source of f's kernel, for inputs of dtypes
 * ext_dtype[e] (any), or host numbers where bit e of ext_host is set. Returns 0, or
 * -1 with `why` saying what it cannot write. */
TIDE_INTERNAL int         tide_fuse_cuda_source(const tide_fused * f, const int32_t * ext_dtype, uint32_t ext_host,
                                                char * buf, size_t n, char * why, size_t n_why);
/* f's kernel compiled for cuda:dev (once per source for the process), or
 * NULL with `why` (no runtime compiler, no CUDA, a source it cannot write). */
TIDE_INTERNAL void *      tide_fuse_cuda_compile(const tide_fused * f, int32_t dev, const int32_t * ext_dtype,
                                                 uint32_t ext_host, char * why, size_t n_why);
/* Launches f->dev_fn on out's device's compute stream, reading ext (device
 * tensors broadcast to out's shape, or host numbers) and writing out. Called
 * where device work is launched: the device queue's thread, a plan's replay. */
TIDE_INTERNAL tide_status tide_fuse_cuda_launch(const tide_fused * f, tide_tensor * const * ext, tide_tensor * out);

#endif
