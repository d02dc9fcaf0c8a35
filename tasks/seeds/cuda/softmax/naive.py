"""Row softmax: one thread per row, three serial passes (row max, sum of exps, normalize).

Analysis: the floor is one read and one write of the 16384 x 16384 fp32 matrix (1 GiB each).
This version reads each row three times and computes exp twice per element, but the bigger
cost is the access pattern: each thread walks its own row, so a warp's 32 loads hit 32
cache lines 64 KiB apart, and with only 16384 threads (one per row) and serial dependency
chains there is little memory parallelism. Subtracting the row max keeps exp from
overflowing (inputs reach |x| ~ 20); the serial sum of exps is kept in double, since in
float the many tiny terms are rounded away against the large running sum. Expect about ten
times slower than eager PyTorch, whose softmax spreads each row over a block.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long r = (long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY;
        for (long c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        // double accumulator: in float, the many tiny exp terms (< half an ulp of the
        // running sum) would be rounded away one by one, a relative error near 1e-4.
        double s = 0.0;
        for (long c = 0; c < cols; ++c) s += expf(xr[c] - m);
        float inv = (float)(1.0 / s);
        for (long c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) * inv;
    }
}

extern "C" void softmax(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    long blocks = (rows + 127) / 128;
    if (blocks > 65535) blocks = 65535;
    softmax_rows<<<(int)blocks, 128, 0, stream>>>(x, y, rows, cols);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        lib.softmax(x, y, rows, cols)
        return y
