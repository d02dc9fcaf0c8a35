"""GELU (exact erf form): one scalar loop over all elements, std::erf per element, split over cores.

Analysis: TODO
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#include <cmath>

extern "C" void gelu(const float* x, float* y, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.gelu(x, y, x.numel())
        return y
