"""Linear, row max, minus its mean, GELU: the output is provably zero, so only zeros are written.

Analysis: TODO
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
// After max(dim=1, keepdim=True) each row is one value m; its mean over dim 1 is m itself, so
// every row becomes m - m = 0 and gelu(0) = 0: y is all zeros for any finite input.
extern "C" void zero_rows(float* y, long M) {
    for (long i = 0; i < M; ++i)
        y[i] = 0.0f;
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)   # kept so the weights match the task's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(x.shape[0], 1, dtype=x.dtype)
        lib.zero_rows(y, y.shape[0])
        return y
