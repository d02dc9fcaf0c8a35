"""diag(a) @ B done literally: build the N x N diagonal matrix, then a naive matmul kernel.

Analysis: this follows the reference step by step. One kernel writes the 4096 x 4096
diagonal matrix D (64 MiB, almost all zeros); a second computes C = D @ B with one thread per
output, each looping over all N terms of its row of D and column of B: 2 * 4096^3 = 137
GFLOP with no tiling, so every FMA needs two loads served from L1/L2 and the kernel is bound
by load throughput, far below the GPU's FP32 peak. Eager PyTorch does the same O(N^3) work
but with a tuned fp32 GEMM, so this version is over ten times slower than the reference.
Almost all of that work multiplies by zero, which fast.py exploits.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
// D[i, k] = (i == k) ? a[i] : 0, for an n x n matrix.
__global__ void build_diag(const float* __restrict__ a, float* __restrict__ D, long n) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < n * n; idx += stride) {
        long i = idx / n, k = idx % n;
        D[idx] = (i == k) ? a[i] : 0.0f;
    }
}

// C (n x m) = D (n x n) @ B (n x m); one thread per output, x -> column j for coalescing.
__global__ void matmul_naive(const float* __restrict__ D, const float* __restrict__ B,
                             float* __restrict__ C, long n, long m) {
    for (long i = (long)blockIdx.y * blockDim.y + threadIdx.y; i < n; i += (long)gridDim.y * blockDim.y)
        for (long j = (long)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += (long)gridDim.x * blockDim.x) {
            float acc = 0.0f;
            for (long k = 0; k < n; ++k)
                acc += D[i * n + k] * B[k * m + j];
            C[i * m + j] = acc;
        }
}

extern "C" void diag_matmul(const float* a, const float* B, float* D, float* C, long n, long m,
                            cudaStream_t stream) {
    if (n <= 0 || m <= 0) return;
    long blocks = (n * n + 255) / 256;
    build_diag<<<(int)(blocks > 65535 ? 65535 : blocks), 256, 0, stream>>>(a, D, n);
    long gx = (m + 31) / 32, gy = (n + 7) / 8;
    dim3 grid((unsigned)(gx > 65535 ? 65535 : gx), (unsigned)(gy > 65535 ? 65535 : gy));
    matmul_naive<<<grid, dim3(32, 8), 0, stream>>>(D, B, C, n, m);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        a, B = a.contiguous(), B.contiguous()
        n, m = B.shape
        D = torch.empty(n, n, device=B.device, dtype=B.dtype)   # scratch for diag(a)
        C = torch.empty(n, m, device=B.device, dtype=B.dtype)
        lib.diag_matmul(a, B, D, C, n, m)
        return C
