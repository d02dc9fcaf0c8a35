"""y = x * sigmoid(x) + bias: one fused pass, vectorized (omp simd) with a polynomial exp.

Analysis: the same single fused pass, now vectorized: exp is an inlined polynomial
(exponent through the float's bits) so `omp simd simdlen(16)` gives 16-lane AVX-512 code,
and x * sigmoid(x) is computed as x / (1 + e^-x). Reading x and writing y once (8 MiB of
traffic, against about 28 MiB and two temporaries for eager's three passes) at vector speed
should beat eager PyTorch, and naive.py by more.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
// e^x for x in [-87, 88]: x = n*ln2 + r, e^x = 2^n * p(r); plain float ops, so it vectorizes.
static inline float exp_poly(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;   // round(x / ln2): 1.5 * 2^23 trick
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;        // x - n * ln2, ln2 split in two
    float p = 1.9875691500e-4f;                                 // Cephes expf coefficients
    p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * __builtin_bit_cast(float, ((int)n + 127) << 23);   // times 2^n via the exponent bits
}

extern "C" void swish_bias(const float* __restrict__ x, const float* __restrict__ bias,
                           float* __restrict__ y, long rows, long cols) {
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        #pragma omp simd simdlen(16)            // 16 lanes: AVX-512 if present
        for (long c = 0; c < cols; ++c)
            yr[c] = xr[c] / (1.0f + exp_poly(-xr[c])) + bias[c];
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = self.bias.numel()
        lib.swish_bias(x, self.bias.contiguous(), y, x.numel() // cols, cols)
        return y
