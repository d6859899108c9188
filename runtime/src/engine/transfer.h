/*
 * transfer.h - copies between the host and a CUDA device as engine tasks
 * (transfer.c), for the `copy` op when it crosses that boundary.
 */
#ifndef TIDE_TRANSFER_H
#define TIDE_TRANSFER_H

#include "cuda_loader.h"

typedef struct tide_transfer {
    tide_opcall c;          /* the copy: in[0] on one side, out[0] on the other */
    void *      staging;    /* pinned host memory, from launch to completion */
    size_t      bytes;
    size_t      cap;        /* staging's size */
} tide_transfer;

/* Whether this build can make the copy c (TIDE_E_DEVICE with the reason if not). */
TIDE_INTERNAL tide_status tide_transfer_check(const tide_opcall * c);
/* Fills *task to run the copy c on its CUDA device's queue, with x (on the
 * caller's stack, copied by the engine) as its context. */
TIDE_INTERNAL void        tide_transfer_task(tide_transfer * x, const tide_opcall * c, tide_engine_task * task);
/* Frees the kept staging blocks through the backend that pinned them: when
 * the backend is replaced (no transfer may be in flight). */
TIDE_INTERNAL void        tide_transfer_free_staging(void);

#endif
