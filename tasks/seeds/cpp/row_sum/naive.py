"""Row sum (B, N) -> (B, 1): rows split over cores, one serial float accumulator per row.

Analysis: one read of 16 MiB and 4 KiB written: memory-bound in principle. But
`acc += row[c]` is one serial chain of dependent float adds (the compiler may not reorder
float additions, so it cannot vectorize), so each core retires about one element per FP-add
latency (~4 cycles) instead of 16 per cycle, against eager PyTorch, whose sum uses vector
partial sums (on a 2-core Xeon VM, where memory bounds both, it measured 0.5-0.8x eager);
the fix is to break the chain, see fast.py.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
extern "C" void row_sum(const float* x, float* y, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (long c = 0; c < cols; ++c)
            acc += x[r * cols + c];
        y[r] = acc;
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, 1, dtype=x.dtype)
        lib.row_sum(x, y, rows, cols)
        return y
