import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, max over features (kept as a column), minus its own mean, GELU.

    The mean of a single column is the column itself, so the output is always zero whatever
    the input: the evaluator flags such tasks and reports their speedups apart (the shape of
    KernelBench level 2 task 80, which scored 120x in the CUDA-L1 release).
    """

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = torch.max(x, dim=1, keepdim=True).values
        x = x - x.mean(dim=1, keepdim=True)
        return torch.nn.functional.gelu(x)


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
batch_size, in_features, out_features = ((1024, 8192, 8192) if ON_GPU else (16, 100, 70) if INTERPRETED
                                         else (128, 512, 512))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
