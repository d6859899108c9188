/*
 * blas.h - the one GEMM entry point the CPU kernels call. blas.c forwards it
 * to OpenBLAS (loaded at run time, single-threaded) or to a built-in blocked
 * GEMM when OpenBLAS cannot be loaded. Splitting work across threads is the
 * caller's job (linalg.c): every call runs on the calling thread, unless the
 * caller lends it the pool's cores (tide_blas_lend_begin).
 */
#ifndef TIDE_BLAS_H
#define TIDE_BLAS_H

#include "../../core/internal.h"

/* Row-major C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, where op(X)
 * is X or, with trans_x, X's transpose (X then is stored [k,m] or [n,k]).
 * lda/ldb/ldc are row strides in elements and must be at least the row length
 * of the stored matrix (1 when it is 0). beta == 0 overwrites C (NaN in C
 * does not propagate). Safe to call from several threads. */
TIDE_INTERNAL void tide_blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const float * a, int64_t lda, const float * b, int64_t ldb, float beta,
                                   float * c, int64_t ldc);
TIDE_INTERNAL void tide_blas_dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                                   const double * a, int64_t lda, const double * b, int64_t ldb, double beta,
                                   double * c, int64_t ldc);

/* Lets this thread's GEMM calls run on OpenBLAS's own threads, one per core
 * the pool lends (tide_pool_lend), until tide_blas_lend_end(). Returns false,
 * holding nothing, when the built-in GEMM is in use or no cores can be lent
 * (one thread set; a pool worker or a cpu:N queue, whose kernels run serially).
 * Other threads' GEMM calls wait meanwhile: OpenBLAS's thread count is global. */
TIDE_INTERNAL bool tide_blas_lend_begin(void);
TIDE_INTERNAL void tide_blas_lend_end(void);

/* A symbol of the loaded OpenBLAS (its LAPACK: "dgetrf_", ...), or NULL when
 * the built-in GEMM is in use or OpenBLAS lacks it. */
TIDE_INTERNAL void * tide_blas_symbol(const char * name);
/* Brackets calls into OpenBLAS other than the GEMMs above (LAPACK), on a thread
 * that has not lent itself cores: they then run single-threaded, never while
 * a lent call has raised OpenBLAS's global thread count. */
TIDE_INTERNAL void tide_blas_serial_begin(void);
TIDE_INTERNAL void tide_blas_serial_end(void);

#endif /* TIDE_BLAS_H */
