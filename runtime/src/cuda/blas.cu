#include "common.cuh"

namespace tide_cuda {
const kernel_entry blas_kernels[] = {{nullptr, nullptr}};
}
