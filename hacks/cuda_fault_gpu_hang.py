"""A kernel that never ends: the worker is killed at the time limit."""
import torch
import torch.nn as nn

import kernels

EXPECT = "timeout/timeout"
TASK = "gelu"
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0, "run_timeout": 30.0}

lib = kernels.load_cuda(r'''
__global__ void spin(volatile int* flag) { while (*flag == 0) { } }
extern "C" void gelu(int* flag, cudaStream_t s) { spin<<<1, 1, 0, s>>>(flag); }
''')


class ModelNew(nn.Module):
    def forward(self, x):
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        lib.gelu(flag)
        return torch.nn.functional.gelu(x)
