"""C = A @ B: one thread per output element, each a K-long dot product read from global memory.

Analysis: the product is 2 * 4096^3 = 137 GFLOP over only 192 MiB of data, so a good GEMM is
compute-bound. Here consecutive threads own consecutive columns j of one row i: A[i, k] is a
broadcast load and B[k, j..j+31] a coalesced 128-byte load, but every multiply-add still needs
two loads (arithmetic intensity of 1 FMA per 8 bytes requested), with no reuse beyond what the
L1/L2 caches happen to catch. The kernel is therefore bound by load/cache throughput, not FMA
units. Eager PyTorch calls cuBLAS's tiled fp32 SGEMM: on an H100 this took 24 ms against
eager's 2.7 ms, about 9x slower.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void matmul_naive(const float* __restrict__ A, const float* __restrict__ B,
                             float* __restrict__ C, long M, long N, long K) {
    long total = M * N, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long i = idx / N, j = idx % N;
        float acc = 0.0f;
        for (long k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
        C[idx] = acc;
    }
}

extern "C" void matmul(const float* A, const float* B, float* C, long M, long N, long K,
                       cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    long blocks = (M * N + 255) / 256;
    if (blocks > 1048576) blocks = 1048576;
    matmul_naive<<<(unsigned)blocks, 256, 0, stream>>>(A, B, C, M, N, K);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty(M, N, device=A.device, dtype=A.dtype)
        lib.matmul(A, B, C, M, N, K)
        return C
