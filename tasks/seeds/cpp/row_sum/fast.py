"""Row sum (B, N) -> (B, 1): 32 independent partial sums per row (4 SIMD registers), then a tree.

Analysis: the sum is split into 32 independent partial sums (lane l adds elements
c = l mod 32), which the compiler keeps in vector registers, so the adds of one iteration do
not wait on each other and the loop runs at load speed; the partials are combined by a
pairwise tree, which is also more accurate than one long chain. That makes the kernel bound
by streaming the 16 MiB input, as eager PyTorch's reduction does: on a 2-core Xeon VM
it measured 0.96x eager and 1.2-2x naive.py.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#define LANES 32

extern "C" void row_sum(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float acc[LANES] = {};                    // lane l sums elements c with c % LANES == l
        long c = 0;
        for (; c + LANES <= cols; c += LANES)
            for (int l = 0; l < LANES; ++l)       // vectorized: LANES / 8 independent AVX adds
                acc[l] += row[c + l];
        for (; c < cols; ++c)
            acc[0] += row[c];
        for (int w = LANES / 2; w > 0; w /= 2)    // pairwise tree over the lanes
            for (int l = 0; l < w; ++l)
                acc[l] += acc[l + w];
        y[r] = acc[0];
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
