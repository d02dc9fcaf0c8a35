"""y = relu(x @ W^T + b): one thread per output, a K-long dot product plus bias and ReLU.

Analysis: 2 * 2048 * 8192 * 4096 = 137 GFLOP on 192 MiB of inputs, so a good kernel is
compute-bound. Here consecutive threads own consecutive outputs n of one row m: x[m, k] is a
broadcast load, but W is stored (out, in), so the 32 threads of a warp read W[n..n+31, k], 32
different rows 32 KiB apart. Every FMA needs its own loads with no deliberate reuse; only the
L1/L2 caches soften the strided W traffic. The bias and ReLU are fused into the same thread,
which is the only thing this version does better than eager PyTorch (cuBLAS SGEMM with a bias
epilogue, then a separate ReLU pass). On an H100 it took 274 ms against eager's 2.7 ms: the
strided W reads make it about 100x slower.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void linear_relu_naive(const float* __restrict__ x, const float* __restrict__ W,
                                  const float* __restrict__ b, float* __restrict__ y,
                                  long M, long N, long K) {
    long total = M * N, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long m = idx / N, n = idx % N;
        float acc = b[n];
        for (long k = 0; k < K; ++k) acc += x[m * K + k] * W[n * K + k];
        y[idx] = fmaxf(acc, 0.0f);
    }
}

extern "C" void linear_relu(const float* x, const float* W, const float* b, float* y,
                            long M, long N, long K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    long blocks = (M * N + 255) / 256;
    if (blocks > 1048576) blocks = 1048576;
    linear_relu_naive<<<(unsigned)blocks, 256, 0, stream>>>(x, W, b, y, M, N, K);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        W, b = self.linear.weight.contiguous(), self.linear.bias.contiguous()
        M, K = x.shape
        N = W.shape[0]
        y = torch.empty(M, N, device=x.device, dtype=x.dtype)
        lib.linear_relu(x, W, b, y, M, N, K)
        return y
