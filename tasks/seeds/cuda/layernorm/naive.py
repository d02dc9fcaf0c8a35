"""LayerNorm over the last dim: one thread per row, three serial passes (mean, variance, write).

Analysis: the floor is one read and one write of the 65536 x 4096 fp32 input (1 GiB each).
Each thread here owns a row and reads it three times: the mean, then the variance as the mean
of (x - mean)^2 (numerically safer than E[x^2] - mean^2 when |mean| is large), then
(x - mean) * rstd * w + b. The access pattern is the problem: a warp's 32 loads land in 32
rows 16 KiB apart, so every load instruction touches 32 cache lines, and with one thread per
row and serial dependency chains there is little memory parallelism. Expect several times
slower than eager PyTorch's LayerNorm, which spreads each row over a block.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y,
                               long rows, long cols, float eps) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long r = (long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float sum = 0.0f;
        for (long c = 0; c < cols; ++c) sum += xr[c];
        float mean = sum / (float)cols;
        float sq = 0.0f;
        for (long c = 0; c < cols; ++c) { float d = xr[c] - mean; sq += d * d; }
        float rstd = 1.0f / sqrtf(sq / (float)cols + eps);   // biased variance, as PyTorch
        for (long c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    }
}

extern "C" void layernorm(const float* x, const float* w, const float* b, float* y,
                          long rows, long cols, float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    long blocks = (rows + 127) / 128;
    if (blocks > 65535) blocks = 65535;
    layernorm_rows<<<(int)blocks, 128, 0, stream>>>(x, w, b, y, rows, cols, eps);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        with torch.no_grad():  # initialized as the task's Model is (the check builds both from one seed)
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.ln.weight.contiguous(), self.ln.bias.contiguous()
        cols = w.numel()
        y = torch.empty_like(x)
        lib.layernorm(x, w, b, y, x.numel() // cols, cols, self.ln.eps)
        return y
