"""MLP block fc2(gelu_tanh(fc1(x))): a naive one-thread-per-output linear kernel, launched twice, and a GELU kernel.

Analysis: the two GEMMs are 2 * 2 * 8192 * 1024 * 4096 = 137 GFLOP; the 128 MiB hidden activation
is written by fc1, read and rewritten by the GELU pass, and read by fc2. Each output of the
linear kernel is a K-long dot product computed by one thread: x[m, k] is broadcast across the
warp, but W is stored (out, in), so a warp reads 32 different rows of W per step and nothing is
reused on purpose, only by the caches. This makes the GEMMs load-bound, far below the FMA peak,
and the separate GELU pass adds another read and write of the hidden layer. Eager PyTorch uses
cuBLAS SGEMM for both layers plus one GELU pass: on an H100 this took 279 ms against eager's
2.9 ms, about 100x slower.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
// y[m, n] = b[n] + sum_k x[m, k] * W[n, k]
__global__ void linear_naive(const float* __restrict__ x, const float* __restrict__ W,
                             const float* __restrict__ b, float* __restrict__ y, long M, long N, long K) {
    long total = M * N, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long m = idx / N, n = idx % N;
        float acc = b[n];
        for (long k = 0; k < K; ++k) acc += x[m * K + k] * W[n * K + k];
        y[idx] = acc;
    }
}

__global__ void gelu_tanh(float* __restrict__ h, long n) {   // in place
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = h[i];
        h[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static unsigned grid_for(long n) { long b = (n + 255) / 256; return (unsigned)(b > 1048576 ? 1048576 : b); }

extern "C" void linear(const float* x, const float* W, const float* b, float* y, long M, long N, long K,
                       cudaStream_t stream) {
    if (M * N > 0) linear_naive<<<grid_for(M * N), 256, 0, stream>>>(x, W, b, y, M, N, K);
}

extern "C" void gelu(float* h, long n, cudaStream_t stream) {
    if (n > 0) gelu_tanh<<<grid_for(n), 256, 0, stream>>>(h, n);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, D = x.shape
        H = self.fc1.out_features
        h = torch.empty(M, H, device=x.device, dtype=x.dtype)
        y = torch.empty(M, D, device=x.device, dtype=x.dtype)
        lib.linear(x, self.fc1.weight.contiguous(), self.fc1.bias.contiguous(), h, M, H, D)
        lib.gelu(h, h.numel())
        lib.linear(h, self.fc2.weight.contiguous(), self.fc2.bias.contiguous(), y, M, D, H)
        return y
