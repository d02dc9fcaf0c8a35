"""Row softmax: the same three passes, each a vectorized omp simd loop with a polynomial exp.

Analysis: the same three passes, each an `omp simd` loop: max and sum become
16-lane vector reductions, exp is an inlined polynomial (Cephes-style, exponent set through
the float's bits) that vectorizes, and the last pass multiplies by 1/sum instead of dividing.
The row is read from memory once (later passes hit L1/L2) and the output written once.
Expect many times naive.py's speed and about eager PyTorch's, which makes similar
passes over each row.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
// e^x for x in [-87, 0]: x = n*ln2 + r, e^x = 2^n * p(r); plain float ops, so it vectorizes.
static inline float exp_poly(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;   // round(x / ln2): 1.5 * 2^23 trick
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;        // x - n * ln2, ln2 split in two
    float p = 1.9875691500e-4f;                                 // Cephes expf coefficients
    p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * __builtin_bit_cast(float, ((int)n + 127) << 23);   // times 2^n via the exponent bits
}

extern "C" void softmax(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = xr[0];
        #pragma omp simd simdlen(16) reduction(max:m)
        for (long c = 0; c < cols; ++c)
            m = xr[c] > m ? xr[c] : m;
        float sum = 0.0f;                       // 16 partial sums, combined at the end
        #pragma omp simd simdlen(16) reduction(+:sum)
        for (long c = 0; c < cols; ++c) {
            float e = exp_poly(xr[c] - m);
            yr[c] = e;
            sum += e;
        }
        float inv = 1.0f / sum;                 // the row is still in L1/L2: this pass is cheap
        #pragma omp simd simdlen(16)
        for (long c = 0; c < cols; ++c)
            yr[c] *= inv;
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.softmax(x, y, x.shape[0], x.shape[1])
        return y
