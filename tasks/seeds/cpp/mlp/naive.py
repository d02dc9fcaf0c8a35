"""MLP fc1 -> GELU(tanh) -> fc2: scalar dot product per output, std::tanh per hidden element.

Analysis: two linears of 2 * 64 * 256 * 1024 = 33.5 MFLOP each, as serial
scalar dot products (one per output, no vectorization), with the tanh GELU applied in the
first kernel as each hidden value is produced (std::tanh per element). The GEMMs dominate:
expect it an order of magnitude slower than eager PyTorch (MKL addmm, vectorized GELU, MKL addmm).
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#include <cmath>

// y[i, j] = b[j] + x[i, :] . W[j, :], optionally followed by the tanh-form GELU.
extern "C" void linear(const float* x, const float* W, const float* b, float* y,
                       long M, long N, long K, bool gelu) {
    #pragma omp parallel for
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float acc = b[j];
            for (long k = 0; k < K; ++k)
                acc += x[i * K + k] * W[j * K + k];
            if (gelu)
                acc = 0.5f * acc * (1.0f + std::tanh(0.7978845608f * (acc + 0.044715f * acc * acc * acc)));
            y[i * N + j] = acc;
        }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, dim = x.shape
        hidden = self.fc1.weight.shape[0]
        h = torch.empty(M, hidden, dtype=x.dtype)
        y = torch.empty(M, dim, dtype=x.dtype)
        lib.linear(x, self.fc1.weight.contiguous(), self.fc1.bias.contiguous(), h, M, hidden, dim, True)
        lib.linear(h, self.fc2.weight.contiguous(), self.fc2.bias.contiguous(), y, M, dim, hidden, False)
        return y
