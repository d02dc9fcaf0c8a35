"""diag(a) @ B == a[:, None] * B: scale row i of B by a[i]; one vectorized pass, rows over cores.

Analysis: row i of diag(a) has a single nonzero, so C[i, j] = a[i] * B[i, j]
exactly (the GEMM's other terms add exact zeros). The O(N^3) GEMM becomes one vectorized pass
that reads B once and writes C once (1 MiB each) with one multiply per element. Expect it
far faster than eager PyTorch (which builds diag(a) and calls SGEMM) and than naive.py;
results match the reference's rounding, one correctly rounded product each.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
extern "C" void diag_matmul(const float* __restrict__ a, const float* __restrict__ B,
                            float* __restrict__ C, long n, long m) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) {
        float s = a[i];
        #pragma omp simd simdlen(16)
        for (long j = 0; j < m; ++j)
            C[i * m + j] = s * B[i * m + j];
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        a, B = a.contiguous(), B.contiguous()
        n, m = B.shape
        C = torch.empty_like(B)
        lib.diag_matmul(a, B, C, n, m)
        return C
