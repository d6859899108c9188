/* blas.c - placeholder until the OpenBLAS loader lands. */
#include "kernels.h"
tide_status  tide_blas_init(void) { return TIDE_OK; }
const char * tide_blas_describe(void) { return "blas=none\n"; }
