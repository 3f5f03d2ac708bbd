/*
Tiny kernel for probes/ncu_check.sh: reads 64 MB once so that a DRAM counter has something to
count. Not a measurement; it only tells whether Nsight Compute can read hardware counters here.

Compile:
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o ncu_tiny probes/ncu_tiny.cu
Run:
  ./ncu_tiny            (prints "ok <sum>")
*/
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

__global__ void touch(const uint4* __restrict__ p, size_t n, unsigned long long* out) {
  unsigned long long acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  atomicAdd(out, acc);
}

int main() {
  const size_t bytes = size_t(64) << 20, n = bytes / 16;
  uint4* p;
  unsigned long long* out;
  if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMalloc(&out, 8) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(p, 1, bytes);
  cudaMemset(out, 0, 8);
  touch<<<264, 256>>>(p, n, out);
  unsigned long long h = 0;
  cudaMemcpy(&h, out, 8, cudaMemcpyDeviceToHost);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  printf("ok %llu\n", h);
  return 0;
}
