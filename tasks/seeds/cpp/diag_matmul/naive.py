"""diag(a) @ B done literally: build the N x N diagonal matrix, then a triple-loop matmul.

Analysis: follows the reference literally: it writes the 512 x 512 diagonal matrix
(1 MiB, almost all zeros) and then runs a naive matmul, 2 * 512^3 = 268 MFLOP of serial dot
products that walk columns of B with a 2 KiB stride. Eager PyTorch does the same O(N^3) work
with MKL's SGEMM, so expect this far slower than eager; nearly all of the work is
multiplying by zero, which fast.py removes.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
// D[i, k] = (i == k) ? a[i] : 0; then C (n x m) = D (n x n) @ B (n x m), one dot product per output.
extern "C" void diag_matmul(const float* a, const float* B, float* D, float* C, long n, long m) {
    #pragma omp parallel for
    for (long i = 0; i < n; ++i)
        for (long k = 0; k < n; ++k)
            D[i * n + k] = (i == k) ? a[i] : 0.0f;
    #pragma omp parallel for
    for (long i = 0; i < n; ++i)
        for (long j = 0; j < m; ++j) {
            float acc = 0.0f;
            for (long k = 0; k < n; ++k)
                acc += D[i * n + k] * B[k * m + j];
            C[i * m + j] = acc;
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
        D = torch.empty(n, n, dtype=B.dtype)   # scratch for diag(a)
        C = torch.empty(n, m, dtype=B.dtype)
        lib.diag_matmul(a, B, D, C, n, m)
        return C
