"""Our format (kernels.load_cuda) with parameters created the legacy way on the host: the
matmul through torch, bias and ReLU in its own kernel. Under a harness that built models
on the GPU, these weights came from another generator than the reference's."""
import math

import torch
import torch.nn as nn

import kernels

EXPECT = "ok"
TASK = "linear_relu"

lib = kernels.load_cuda(r'''
__global__ void bias_relu_k(float* y, const float* b, long M, long N) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < M * N) { float v = y[i] + b[i % N]; y[i] = v > 0.0f ? v : 0.0f; }
}
extern "C" void bias_relu(float* y, const float* b, long M, long N, cudaStream_t s) {
    bias_relu_k<<<(M * N + 255) / 256, 256, 0, s>>>(y, b, M, N);
}
''')


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        y = x @ self.weight.t()
        lib.bias_relu(y, self.bias, y.shape[0], y.shape[1])
        return y
