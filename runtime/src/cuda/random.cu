#include "common.cuh"

namespace tide_cuda {
const kernel_entry random_kernels[] = {{nullptr, nullptr}};
}
