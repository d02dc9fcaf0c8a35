"""Writes only the first half of its output and leaves the rest to whatever the allocator
hands back: under a harness that runs the reference first, that is often the reference's
freed, correct output."""
import torch
import torch.nn as nn

import kernels

EXPECT = "rejected/unwritten_output"
TASK = "gelu"

lib = kernels.load_cpp(r'''
#include <cmath>
extern "C" void gelu_half(const float* x, float* y, long n) {
    for (long i = 0; i < n / 2; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}''')


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.gelu_half(x, y, x.numel())
        return y
