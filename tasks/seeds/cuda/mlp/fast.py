"""MLP block: cuBLAS GEMMs via torch.mm/addmm, with fc1's bias add and tanh-GELU fused into one in-place kernel.

Analysis: the two GEMMs (137 GFLOP together, about 3 ms of fp32 SGEMM on an H100) dominate, and
cuBLAS already runs them near the FMA peak, so they stay library calls: torch.mm for fc1 without
its bias, torch.addmm for fc2 with the bias folded into the GEMM. The only memory-bound work is
on the 8192 x 4096 hidden activation (128 MiB): one custom kernel adds fc1's bias and applies
the tanh-form GELU in place, reading and writing it once with float4 loads (the bias for a
float4 comes from one aligned float4 load, since the row length is a multiple of 4). Eager
PyTorch does the same amount of memory traffic (bias in addmm's epilogue, then a GELU pass), so
this is about 1x (2.85 ms vs 2.86 ms on an H100): the GEMMs set the time.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__device__ __forceinline__ float gelu_tanh(float v) {
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

// h[m, n] = gelu_tanh(h[m, n] + b[n]) in place; h is rows x cols, row-major.
__global__ void bias_gelu_k(float* __restrict__ h, const float* __restrict__ b, long total, long cols, bool vec) {
    long stride = (long)gridDim.x * blockDim.x;
    long i0 = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {                                     // cols % 4 == 0: a float4 stays in one row
        float4* h4 = reinterpret_cast<float4*>(h);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        long cols4 = cols / 4;
        for (long i = i0; i < total / 4; i += stride) {
            float4 v = h4[i], bb = b4[i % cols4];
            h4[i] = make_float4(gelu_tanh(v.x + bb.x), gelu_tanh(v.y + bb.y),
                                gelu_tanh(v.z + bb.z), gelu_tanh(v.w + bb.w));
        }
    } else {
        for (long i = i0; i < total; i += stride) h[i] = gelu_tanh(h[i] + b[i % cols]);
    }
}

extern "C" void bias_gelu(float* h, const float* b, long rows, long cols, cudaStream_t stream) {
    long total = rows * cols;
    if (total <= 0) return;
    bool vec = cols % 4 == 0 && (((size_t)h | (size_t)b) & 15) == 0;
    long blocks = ((vec ? total / 4 : total) + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    bias_gelu_k<<<(unsigned)blocks, 256, 0, stream>>>(h, b, total, cols, vec);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        h = torch.mm(x, self.fc1.weight.t())                  # cuBLAS, no bias: (batch, hidden)
        lib.bias_gelu(h, self.fc1.bias.contiguous(), h.shape[0], h.shape[1])
        return torch.addmm(self.fc2.bias, h, self.fc2.weight.t())
