"""Builds its kernel inside its first forward (load_cpp on first use, as many load_inline
solutions do), under a 0.3 s call deadline: the compiler runs for longer than the first
call's 0.9 s. A build inside a call is work, not a hang: the worker's watchdog sees the build
on the call's stack and extends the deadline while it runs."""
import torch
import torch.nn as nn

import kernels

EXPECT = "ok"
TASK = "gelu"
OPTIONS = {"call_timeout": 0.3}

SRC = r'''
#include <math.h>
// honest/cpu_first_call_build.py: exact GELU, built at the first forward
extern "C" void gelu_first_call(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
'''
_lib = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not _lib:
            _lib.append(kernels.load_cpp(SRC))
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib[0].gelu_first_call(x, y, x.numel())
        return y
