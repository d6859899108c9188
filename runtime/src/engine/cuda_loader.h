/*
 * cuda_loader.h - the CUDA backend as the rest of libtide sees it: its
 * function table (device.h) once loaded, and each device's caching allocator.
 */
#ifndef TIDE_CUDA_LOADER_H
#define TIDE_CUDA_LOADER_H

#include "devalloc.h"

/* CUDA devices Tide uses at most (more are left out of tide_cuda_device_count). */
enum { TIDE_MAX_CUDA_DEVICES = 16 };

/* A device's streams: its queue runs ops on the compute stream, and copies
 * from the host on the copy stream, so that they overlap kernels; the engine
 * orders the two with events where an op depends on the other's work. */
enum { TIDE_STREAM_COMPUTE = 0, TIDE_STREAM_COPY = 1, TIDE_STREAMS = 2 };

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
/* cuda:`device`'s stream of that kind (TIDE_STREAM_*), made on first use; as tide_cuda_stream. */
TIDE_INTERNAL void *              tide_cuda_stream_of(int32_t device, int32_t kind);
/* Makes cuda:`device`'s stream `waiter` wait, on the device, for the work
 * given so far to its stream `waited` (an event recorded there now). Called
 * from the device's queue thread only; `what` names the op for errors. */
TIDE_INTERNAL tide_status         tide_cuda_wait_stream(int32_t device, int32_t waiter, int32_t waited,
                                                        const char * what);
/* The backend's kernel for registry op `op`, or NULL when it has none
 * (or there is no backend); looked up once per op. */
TIDE_INTERNAL tide_devkernel_fn   tide_cuda_kernel(int32_t op);
/* After tide_cuda_kernel(op) found none: why, as the backend said ("" if it did not). */
TIDE_INTERNAL const char *        tide_cuda_no_kernel_why(int32_t op);
/* The settings an op enqueued now for a CUDA device takes along (TIDE_DEVCALL_*). */
TIDE_INTERNAL uint32_t            tide_cuda_call_flags(void);
/* Launches the op call c, whose results are on a CUDA device, on that
 * device's stream with the backend's kernel: the engine task of a device op
 * (engine/devcall.c). Returns once it is launched, not done. */
TIDE_INTERNAL tide_status         tide_cuda_launch(tide_opcall * c);
/* What calls recorded into a device graph took (device.h's capture_begin):
 * their scratch and their reports' device memory, which every run of the
 * graph uses again, so kept until the graph is freed. */
typedef struct tide_cuda_held {
    tide_devblock ** blocks;
    int32_t          n, cap;
} tide_cuda_held;
/* tide_cuda_launch while the device's stream records a graph: what the call
 * takes goes to `held`, and the device memory its work writes its report to
 * (or NULL) to *dev_report, for the caller to copy out after each run. A
 * random op reads its Philox slice at each run from device memory rng_at
 * ({seed, offset}, which the caller fills before each run). */
TIDE_INTERNAL tide_status         tide_cuda_launch_held(tide_opcall * c, tide_cuda_held * held, void ** dev_report,
                                                        const void * rng_at);
/* Gives back to cuda:`dev` everything h holds (the graph it served is freed) and empties it. */
TIDE_INTERNAL void                tide_cuda_held_free(tide_cuda_held * h, int32_t dev);
/* A report in pinned host memory with code NONE, for a copy out of a graph's
 * device report; NULL with the error set (naming op). Give it back with
 * tide_cuda_raise_report or tide_cuda_give_report. */
TIDE_INTERNAL tide_devreport *    tide_cuda_take_report(const char * op);
/* The completion step of an op launched by tide_cuda_launch, once the device
 * has done it: raises what its work reported (an index out of range). */
TIDE_INTERNAL tide_status         tide_cuda_complete(tide_opcall * c);
/* Raises what report r says of op `op` on cuda:`dev` (the device has done
 * the work that fills it), and gives r back: what tide_cuda_complete does for
 * one op call, for callers that launch several (a graph replay). */
TIDE_INTERNAL tide_status         tide_cuda_raise_report(const char * op, int32_t dev, tide_devreport * r);
/* Gives back report r (NULL: nothing) without reading it. */
TIDE_INTERNAL void                tide_cuda_give_report(tide_devreport * r);
/* Gives back a report an op took and never completed (its launch failed, or
 * the device did): the op's `drop`. */
TIDE_INTERNAL void                tide_cuda_drop_report(tide_opcall * c);
/* Frees the pinned memory of reports through the backend that made it: when
 * the backend is replaced (no op may be in flight). */
TIDE_INTERNAL void                tide_cuda_free_reports(void);
/* Replaces the backend with `t` (NULL: none), dropping the allocators: for
 * tests, which drive the CUDA paths with a fake backend on the host. Not
 * thread-safe: call it while no other thread uses CUDA. */
TIDE_INTERNAL void                tide_cuda_use_backend(const tide_devapi * t);

#endif
