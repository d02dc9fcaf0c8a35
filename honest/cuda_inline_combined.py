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
SET_FLAGS = ["cudnn_benchmark"]

cuda_src = r"""
#include <torch/extension.h>
__global__ void bias_relu_k(float* y, const float* b, long M, long N) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < M * N) { float v = y[i] + b[i % N]; y[i] = v > 0.0f ? v : 0.0f; }
}
torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor b) {
    long M = y.size(0), N = y.size(1);
    bias_relu_k<<<(M * N + 255) / 256, 256>>>(y.data_ptr<float>(), b.data_ptr<float>(), M, N);
    return y;
}
"""
ext = load_inline("honest_bias_relu", cpp_sources="torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor b);",
                  cuda_sources=cuda_src, functions=["bias_relu_"])


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
