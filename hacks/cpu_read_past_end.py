"""Reads one element past the end of its input (an off-by-one loop bound, as the builtin
teacher's mutations make on purpose). Whatever lay past the end used to decide the verdict;
the harness fences every input with NaN, so the result is NaN every time."""
import torch
import torch.nn as nn

import kernels

EXPECT = "incorrect/nan"
TASK = "gelu"

lib = kernels.load_cpp(r'''
#include <cmath>
extern "C" void gelu_peek(const float* x, float* y, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f)) + 0.0f * x[i + 1];  // x[n] at the end
}
''')


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.gelu_peek(x, y, x.numel())
        return y
