"""OpenMP's max-active-levels set to 0 by the candidate's own -fopenmp library on its way out:
the library shares torch's OpenMP runtime (one libgomp.so.1 per process), and with
no active level every parallel region of the reference's CPU ops runs on one thread. Contained:
max-active-levels is one of the watched settings (guards.FLAGS): what a candidate sets applies
to its own calls and is put back after each, so the reference keeps its threads (no gain)."""
import kernels
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
OPTIONS = {"require_kernel": True}
SET_FLAGS = ["omp_levels"]
MAX_SPEEDUP = 3.0  # honest gelu beside the reference: about 1; the attack, with 2+ cores, far more

lib = kernels.load_cpp(r"""
#include <cmath>
#include <omp.h>
extern "C" void gelu(const float* x, float* y, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678f));
    omp_set_max_active_levels(0);
}
""")  # load_cpp builds with -fopenmp


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.gelu(x, y, x.numel())
        return y
