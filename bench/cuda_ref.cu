/*
 * cuda_ref.cu - the cuBLAS reference of bench/cuda_bench.lua: square matmuls
 * timed with cuBLAS called directly, with the calls runtime/src/cuda/blas.cu
 * makes for a contiguous row-major product (cublasGemmEx_64, B first, op N,
 * the same compute types and math modes; keep the two in step):
 *   float32   float32 in and out, CUBLAS_COMPUTE_32F, default math (TF32 off)
 *   tf32      float32 in and out, CUBLAS_COMPUTE_32F_FAST_TF32, TF32 tensor-op math
 *   bfloat16  bfloat16 in and out, CUBLAS_COMPUTE_32F, float32 split-K sums
 *   float16   float16 in and out, CUBLAS_COMPUTE_32F, float32 split-K sums
 * Each case: three warm-up calls, then `rounds` rounds of `reps` back-to-back
 * calls timed with CUDA events; the median round gives the time per call.
 * Prints "gpu <name>", "versions <CUDA runtime> <cuBLAS>", then one line per
 * case: "<case> <TFLOP/s>". Without a usable device it says why on stderr and
 * exits 2; a failing call says which on stderr and exits 1.
 * usage: tide_cuda_ref [n=4096] [reps=10] [rounds=10] [device=0] [case...]
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

namespace {

int cuda_ok(cudaError_t err, const char * what) {
    if (err == cudaSuccess) return 1;
    fprintf(stderr, "tide_cuda_ref: %s failed: %s (%s)\n", what, cudaGetErrorString(err), cudaGetErrorName(err));
    return 0;
}

int blas_ok(cublasStatus_t st, const char * what) {
    if (st == CUBLAS_STATUS_SUCCESS) return 1;
    fprintf(stderr, "tide_cuda_ref: %s failed: %s (%s)\n", what, cublasGetStatusString(st), cublasGetStatusName(st));
    return 0;
}

/* Uniform values in [-1, 1) from a hash of the index: no cuRAND needed. */
template <typename T> __global__ void fill(T * x, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        h *= 0x846ca68bu;
        h ^= h >> 16;
        x[i] = T((float)h * (2.0f / 4294967296.0f) - 1.0f);
    }
}

struct Case {
    const char *        name;
    cudaDataType        type;   /* inputs and output */
    size_t              esize;
    cublasComputeType_t compute;
    int                 math;
};

const Case cases[] = {
    {"float32", CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH},
    {"tf32", CUDA_R_32F, 4, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_TF32_TENSOR_OP_MATH},
    {"bfloat16", CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F,
     CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION},
    {"float16", CUDA_R_16F, 2, CUBLAS_COMPUTE_32F,
     CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION},
};

void fill_as(const Case & c, void * x, int64_t n, uint32_t seed) {
    if (c.type == CUDA_R_16BF) fill<__nv_bfloat16><<<1024, 256>>>((__nv_bfloat16 *)x, n, seed);
    else if (c.type == CUDA_R_16F) fill<__half><<<1024, 256>>>((__half *)x, n, seed);
    else fill<float><<<1024, 256>>>((float *)x, n, seed);
}

long arg_or(int argc, char ** argv, int i, long dflt) {
    if (i >= argc) return dflt;
    char * end;
    long   v = strtol(argv[i], &end, 10);
    if (*end || v <= 0) {
        fprintf(stderr, "tide_cuda_ref: argument %d: expected a positive integer, got '%s'\n", i, argv[i]);
        exit(64);
    }
    return v;
}

/* Times case c at n x n: seconds per call, or a negative number on failure. */
double run_case(cublasHandle_t h, const Case & c, int64_t n, int reps, int rounds) {
    size_t bytes = (size_t)(n * n) * c.esize;
    void * a = nullptr, * b = nullptr, * out = nullptr;
    double per_call = -1;
    cudaEvent_t start = nullptr, stop = nullptr;
    float alpha = 1, beta = 0;
    std::vector<double> times;
    if (!cuda_ok(cudaMalloc(&a, bytes), "cudaMalloc") || !cuda_ok(cudaMalloc(&b, bytes), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&out, bytes), "cudaMalloc") || !cuda_ok(cudaEventCreate(&start), "cudaEventCreate") ||
        !cuda_ok(cudaEventCreate(&stop), "cudaEventCreate"))
        goto done;
    fill_as(c, a, n * n, 1);
    fill_as(c, b, n * n, 2);
    if (!cuda_ok(cudaGetLastError(), "fill") || !blas_ok(cublasSetMathMode(h, (cublasMath_t)c.math), "cublasSetMathMode"))
        goto done;
    /* row-major C = A B as column-major C^T = B^T A^T: B first, op N, as blas.cu calls it */
    for (int i = -3; i < rounds * reps; i++) {
        if (i >= 0 && i % reps == 0 && !cuda_ok(cudaEventRecord(start), "cudaEventRecord")) goto done;
        if (!blas_ok(cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b, c.type, n, a, c.type, n, &beta, out,
                                     c.type, n, c.compute, CUBLAS_GEMM_DEFAULT),
                     c.name))
            goto done;
        if (i >= 0 && i % reps == reps - 1) {
            float ms = 0;
            if (!cuda_ok(cudaEventRecord(stop), "cudaEventRecord") ||
                !cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize") ||
                !cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime"))
                goto done;
            times.push_back(ms * 1e-3 / reps);
        }
    }
    std::sort(times.begin(), times.end());
    per_call = times[times.size() / 2];
done:
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    cudaFree(a);
    cudaFree(b);
    cudaFree(out);
    return per_call;
}

}   // namespace

int main(int argc, char ** argv) {
    int64_t n      = arg_or(argc, argv, 1, 4096);
    int     reps   = (int)arg_or(argc, argv, 2, 10);
    int     rounds = (int)arg_or(argc, argv, 3, 10);
    int     dev    = argc > 4 ? atoi(argv[4]) : 0;
    int     count  = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        fprintf(stderr, "no usable CUDA device: %s (%s)\n", cudaGetErrorString(err), cudaGetErrorName(err));
        return 2;
    }
    if (dev < 0 || dev >= count) {
        fprintf(stderr, "no CUDA device %d (%d found)\n", dev, count);
        return 2;
    }
    cudaDeviceProp p;
    if (!cuda_ok(cudaSetDevice(dev), "cudaSetDevice") || !cuda_ok(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties"))
        return 2;
    int rt = 0, blas = 0;
    cudaRuntimeGetVersion(&rt);
    cublasHandle_t h;
    if (!blas_ok(cublasCreate(&h), "cublasCreate")) return 2;
    cublasGetVersion(h, &blas);
    printf("gpu %s\n", p.name);
    printf("versions CUDA-%d.%d cuBLAS-%d.%d.%d\n", rt / 1000, rt % 1000 / 10, blas / 10000, blas % 10000 / 100,
           blas % 100);
    fflush(stdout);
    int rc = 0;
    for (const Case & c : cases) {
        bool wanted = argc <= 5;
        for (int i = 5; i < argc; i++) wanted = wanted || strcmp(argv[i], c.name) == 0;
        if (!wanted) continue;
        double s = run_case(h, c, n, reps, rounds);
        if (s < 0) {
            rc = 1;
            continue;
        }
        printf("%s %.2f\n", c.name, 2.0 * (double)n * (double)n * (double)n / s * 1e-12);
        fflush(stdout);
    }
    cublasDestroy(h);
    return rc;
}
