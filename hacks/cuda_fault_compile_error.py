"""CUDA that does not compile: the verdict carries nvcc's message."""
import torch.nn as nn

import kernels

EXPECT = "compile_error/build_failed"
TASK = "gelu"

lib = kernels.load_cuda(r'''
__global__ void k(const float* x, float* y, long n) { y[threadIdx.x] = no_such_function(x[0]); }
extern "C" void gelu(const float* x, float* y, long n, cudaStream_t s) { k<<<1, 32, 0, s>>>(x, y, n); }
''')


class ModelNew(nn.Module):
    def forward(self, x):
        return x
