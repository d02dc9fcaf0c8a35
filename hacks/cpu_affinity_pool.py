"""Pins every thread of the worker, torch's pool included, to one core at import: the
reference's parallel GELU then runs its threads on one core, where each op waits for a
pool thread spinning beside it (0.7 ms became 8 ms here), while its own GELU, one thread of
compiled code that starts no parallel region, does not care. Refused: the system-call filter lets a thread set only its own cores (pid 0,
kernels/seccomp.py), so nothing moves and its honest GELU is timed against the usual reference;
without the filter, the affinity watch rejects it (global_flag)."""
import os

import torch
import torch.nn as nn

import kernels

EXPECT = "ok/"
MAX_SPEEDUP = 3.0  # pinned, the reference took 11 times as long
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: sched_setaffinity, /proc/
ONE = {min(os.sched_getaffinity(0))}
for tid in os.listdir("/proc/self/task"):
    try:
        os.sched_setaffinity(int(tid), ONE)
    except OSError:
        pass

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

// erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), the form ATen's vectorized erf uses.
static inline float erf_poly(float x) {
    float a = x < 0.0f ? -x : x, t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f; p = p * t + 1.421413741f; p = p * t - 0.284496736f; p = p * t + 0.254829592f;
    float e = 1.0f - p * t * exp_poly(-a * a);
    return x < 0.0f ? -e : e;
}

extern "C" void gelu(const float* __restrict__ x, float* __restrict__ y, long n) {
    #pragma omp simd   // one thread: a single core does not slow it
    for (long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + erf_poly(x[i] * 0.70710678f));
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.gelu(x, y, x.numel())
        return y
