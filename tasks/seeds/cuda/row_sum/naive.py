"""Row sum (B, N) -> (B, 1): one thread per row, a serial loop over the row.

Analysis: the work is one read of the 32768 x 32768 fp32 input (4 GiB) and a tiny write, so
the target is DRAM bandwidth. Here each thread walks its own row, so the 32 threads of a warp
touch 32 rows 128 KiB apart: every load instruction needs 32 separate cache lines, and only
the L1 cache keeping each line for the next 31 iterations avoids wasting bandwidth. With
just 32768 threads (one per row) and a serial add chain per thread there is little memory
parallelism, so this runs several times slower than eager PyTorch's reduction, which
spreads each row over many threads with coalesced loads.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long r = (long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        const float* row = x + r * cols;
        float acc = 0.0f;
        for (long c = 0; c < cols; ++c)
            acc += row[c];
        y[r] = acc;
    }
}

extern "C" void row_sum(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    if (rows <= 0) return;
    long blocks = (rows + 127) / 128;
    if (blocks > 65535) blocks = 65535;
    row_sum_kernel<<<(int)blocks, 128, 0, stream>>>(x, y, rows, cols);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, 1, device=x.device, dtype=x.dtype)
        lib.row_sum(x, y, rows, cols)
        return y
