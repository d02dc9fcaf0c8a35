"""Writes only the first half of its output; the rest is whatever the caching allocator
hands back, which under a reference-first harness is the reference's freed result."""
import torch
import torch.nn as nn

import kernels

EXPECT = "rejected/unwritten_output"
TASK = "gelu"

lib = kernels.load_cuda(r'''
__global__ void gelu_half(const float* x, float* y, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n / 2; i += (long)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
extern "C" void gelu(const float* x, float* y, long n, cudaStream_t s) {
    gelu_half<<<4096, 256, 0, s>>>(x, y, n);
}''')


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.gelu(x, y, x.numel())
        return y
