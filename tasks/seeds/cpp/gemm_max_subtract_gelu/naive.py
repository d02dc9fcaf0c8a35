"""Linear, row max, minus its mean, GELU: every step computed as written, one scalar loop each.

Analysis: computes every step as written: a 128 x 512 x 512 linear (67 MFLOP of
serial scalar dot products), a row max, the mean over the kept single column, the subtraction
and GELU. The result is m - m = 0 on every row, so all that arithmetic produces zeros;
expect it an order of magnitude slower than eager PyTorch, whose linear is an MKL SGEMM.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#include <cmath>

// h = x @ W^T + b (M x N); m[i] = max_j h[i, j]; y[i] = gelu(m[i] - mean over the kept column).
extern "C" void gemm_max_sub_gelu(const float* x, const float* W, const float* b, float* h,
                                  float* y, long M, long N, long K) {
    #pragma omp parallel for
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float acc = b[j];
            for (long k = 0; k < K; ++k)
                acc += x[i * K + k] * W[j * K + k];
            h[i * N + j] = acc;
        }
    for (long i = 0; i < M; ++i) {
        float m = h[i * N];
        for (long j = 1; j < N; ++j)
            m = std::fmax(m, h[i * N + j]);
        float mean = m / 1.0f;                   // mean over dim 1, which now has one element
        float v = m - mean;
        y[i] = 0.5f * v * (1.0f + std::erf(v * 0.70710678f));
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        W, b = self.gemm.weight.contiguous(), self.gemm.bias.contiguous()
        M, K = x.shape
        N = W.shape[0]
        h = torch.empty(M, N, dtype=x.dtype)    # scratch for the linear's output
        y = torch.empty(M, 1, dtype=x.dtype)
        lib.gemm_max_sub_gelu(x, W, b, h, y, M, N, K)
        return y
