"""GELU (exact erf form): one scalar loop over all elements, std::erf per element, split over cores.

Analysis: 512 x 4096 fp32 is 8 MiB in and 8 MiB out, so at memory speed this is a
fraction of a millisecond, but here it is compute-bound: std::erf is an out-of-line libm call
per element that the compiler cannot vectorize, so even split over the cores expect it
many times slower than eager PyTorch. Eager GELU runs one vectorized
(AVX-512) pass; fast.py shows that the gap is the scalar erf, not the memory traffic.
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
