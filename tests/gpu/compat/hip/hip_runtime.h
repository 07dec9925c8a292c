// A minimal HIP-on-CUDA compatibility header, used only by the GPU test on NVIDIA hosts where no
// working hip/hip_runtime.h for NVIDIA exists (Debian's HIP 5.2 headers do not compile against
// CUDA 13). It maps exactly the HIP calls examples/hip_smoke uses to their CUDA equivalents.
#pragma once
#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipDeviceProp_t = cudaDeviceProp;
constexpr hipError_t hipSuccess = cudaSuccess;
constexpr cudaMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
constexpr cudaMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;

inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) { return cudaGetDeviceProperties(p, d); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
inline hipError_t hipDeviceSynchronize() { return cudaDeviceSynchronize(); }
inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }

#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
