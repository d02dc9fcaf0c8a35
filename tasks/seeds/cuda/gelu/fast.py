"""GELU (exact erf form): float4 loads and stores in a grid-stride loop, scalar tail.

Analysis: GELU is memory-bound: 16384 x 32768 fp32 is 2 GiB read and 2 GiB written, about
1.4 ms at H100's ~3 TB/s, while erff's few tens of FLOPs per element take well under that.
So the only goal is to stream memory at full speed: each thread moves 16 bytes per load and
store (float4), the grid is capped and strides over the data so index math is amortized, and
a scalar kernel handles the last n % 4 elements (or everything if a pointer is not 16-byte
aligned). Eager PyTorch's gelu is already one vectorized pass, so this matches it (about 1x)
rather than beating it; the gain over naive.py is the wider memory transactions.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__device__ __forceinline__ float gelu1(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_vec4(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = gelu1(v.x); v.y = gelu1(v.y); v.z = gelu1(v.z); v.w = gelu1(v.w);
        y[i] = v;
    }
}

__global__ void gelu_scalar(const float* __restrict__ x, float* __restrict__ y, long start, long n) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = start + (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = gelu1(x[i]);
}

static int grid_for(long work) {          // capped grid for a grid-stride loop
    long b = (work + 255) / 256;
    return (int)(b > 65535 ? 65535 : b);
}

extern "C" void gelu(const float* x, float* y, long n, cudaStream_t stream) {
    if (n <= 0) return;
    bool aligned = (((size_t)x | (size_t)y) & 15) == 0;
    long n4 = aligned ? n / 4 : 0;
    if (n4 > 0)
        gelu_vec4<<<grid_for(n4), 256, 0, stream>>>((const float4*)x, (float4*)y, n4);
    if (4 * n4 < n)
        gelu_scalar<<<grid_for(n - 4 * n4), 256, 0, stream>>>(x, y, 4 * n4, n);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.gelu(x, y, x.numel())
        return y
