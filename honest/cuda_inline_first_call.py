"""KernelBench's format with the build deferred to the first forward, as several published
kernels do (the extension made the first time it is needed): a minute of compilers inside a
call. Honest. While it builds, the worker is host work to the GPU gate (stopped while
another worker times, not waited for), and the watchdog keeps the call's deadline off."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

EXPECT = "ok"
TASK = "gelu"

cuda_src = r"""
#include <torch/extension.h>
__global__ void gelu_k(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
torch::Tensor gelu_first_call(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    gelu_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


_ext = []  # built by the first forward of any instance


class ModelNew(nn.Module):
    def forward(self, x):
        if not _ext:
            _ext.append(load_inline("honest_gelu_first_call", cpp_sources="torch::Tensor gelu_first_call(torch::Tensor x);",
                                    cuda_sources=cuda_src, functions=["gelu_first_call"]))
        return _ext[0].gelu_first_call(x.contiguous())
