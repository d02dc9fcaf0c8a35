"""LayerNorm over the last dim: per row a mean pass, a variance pass, a normalize pass; scalar loops.

Analysis: per 4 KiB row a mean pass, a variance pass and a normalize pass, all in
L1 after the first read, so 8 MiB in and 8 MiB out is the memory cost. The two reductions are
serial float chains that cannot vectorize, and the output pass divides by sqrt(var + eps) for
every element. Expect it a few times slower than eager PyTorch's vectorized LayerNorm.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#include <cmath>

extern "C" void layernorm(const float* x, const float* w, const float* b, float* y,
                          long rows, long cols, float eps) {
    #pragma omp parallel for
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float mean = 0.0f;
        for (long c = 0; c < cols; ++c)
            mean += xr[c];
        mean /= cols;
        float var = 0.0f;
        for (long c = 0; c < cols; ++c)
            var += (xr[c] - mean) * (xr[c] - mean);
        var /= cols;
        for (long c = 0; c < cols; ++c)
            y[r * cols + c] = (xr[c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        with torch.no_grad():  # initialized as the task's Model is (the check builds both from one seed)
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.layernorm(x, self.ln.weight, self.ln.bias, y, x.shape[0], x.shape[1], self.ln.eps)
        return y
