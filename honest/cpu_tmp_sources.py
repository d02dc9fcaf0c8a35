"""Writes its kernel's source to a folder of its own in /tmp and builds it from there, as
published load_inline kernels do (`os.makedirs('/tmp/cuda_extensions')`, sources written
there, then built). The job's /tmp is its own (a fresh tmpfs; what was in /tmp is there
read-only): the write lands, and goes with the job."""
import os

import torch
import torch.nn as nn

import kernels

EXPECT = "ok"
TASK = "gelu"
NEEDS = ("private mounts",)

SRC = r'''
#include <math.h>
// honest/cpu_tmp_sources.py: exact GELU, its source written to /tmp first
extern "C" void gelu_tmp_sources(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
'''
os.makedirs("/tmp/cudal1_tmp_sources", exist_ok=True)
with open("/tmp/cudal1_tmp_sources/gelu.cpp", "w") as f:
    f.write(SRC)
with open("/tmp/cudal1_tmp_sources/gelu.cpp") as f:
    _lib = kernels.load_cpp(f.read())


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.gelu_tmp_sources(x, y, x.numel())
        return y
