"""C++ that does not compile: the verdict carries the compiler's message."""
import torch.nn as nn

import kernels

EXPECT = "compile_error/build_failed"
TASK = "gelu"

lib = kernels.load_cpp(r'''
extern "C" void gelu(const float* x, float* y, long n) {
    for (long i = 0; i < n; i++) y[i] = undefined_function(x[i]);
}''')


class ModelNew(nn.Module):
    def forward(self, x):
        return x
