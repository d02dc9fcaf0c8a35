"""y = x * sigmoid(x) + bias: one scalar loop per row, std::exp per element.

Analysis: one fused loop, so 4 MiB is read and 4 MiB written once, unlike eager
PyTorch's three passes (sigmoid, multiply, add: three reads, three writes, two temporaries).
But each element costs a scalar libm exp call and a division, which the compiler cannot
vectorize, so the loop is compute-bound: expect it slower than eager, whose three passes
are each vectorized.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#include <cmath>

extern "C" void swish_bias(const float* x, const float* bias, float* y, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) {
            float v = x[r * cols + c];
            y[r * cols + c] = v * (1.0f / (1.0f + std::exp(-v))) + bias[c];
        }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = self.bias.numel()
        lib.swish_bias(x, self.bias.contiguous(), y, x.numel() // cols, cols)
        return y
