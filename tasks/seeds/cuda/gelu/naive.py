"""GELU (exact erf form): one thread per element, scalar loads, grid-stride loop.

Analysis: GELU is elementwise, so the floor is one read and one write of every element
(16384 x 32768 fp32 = 2 GiB in, 2 GiB out). This version already makes a single pass and its
warp accesses are coalesced, but each thread moves only 4 bytes per load and the loop carries
64-bit index arithmetic per element, so fewer bytes are in flight per instruction than the
memory system could take. erff costs some tens of instructions per element, well hidden
behind the memory traffic. Eager PyTorch's gelu is also one vectorized pass, so expect this
to run at about its speed or a little slower.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));   // x * Phi(x)
    }
}

extern "C" void gelu(const float* x, float* y, long n, cudaStream_t stream) {
    if (n <= 0) return;
    long blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;   // capped grid; the grid-stride loop covers the rest
    gelu_kernel<<<(int)blocks, 256, 0, stream>>>(x, y, n);
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
