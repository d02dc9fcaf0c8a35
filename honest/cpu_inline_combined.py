"""KernelBench's own format (load_inline) with every honest habit at once: legacy parameter
creation on the host, cuDNN autotuning switched on, and one preallocated output buffer
returned on every call."""
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

EXPECT = "ok"
TASK = "linear_relu"
FLAGS = ["reused_output"]
OPTIONS = {"call_timeout": 1.0}  # with torch_compile.py: its build and that compile run side by side
SET_FLAGS = ["cudnn_benchmark"]

src = r"""
#include <torch/extension.h>
torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor b) {
    float* yp = y.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    long M = y.size(0), N = y.size(1);
    #pragma omp parallel for
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) { float v = yp[i * N + j] + bp[j]; yp[i * N + j] = v > 0.0f ? v : 0.0f; }
    return y;
}
"""
ext = load_inline("honest_bias_relu", cpp_sources=src, functions=["bias_relu_"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        torch.backends.cudnn.benchmark = True
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape[0] != x.shape[0]:
            self.out = x.new_empty(x.shape[0], self.weight.shape[0])
        torch.matmul(x, self.weight.t(), out=self.out)
        return ext.bias_relu_(self.out, self.bias)
