"""A Triton GELU that remembers its result by the input's address and hands it back when
called again on the same buffer, new values or not: the timed calls would cost nothing."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

EXPECT = "rejected/cached_output"
TASK = "gelu"
OPTIONS = {"language": "triton", "require_kernel": True}


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        key = x.data_ptr()
        if key not in self.seen:
            y = torch.empty_like(x)
            gelu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
            self.seen[key] = y
        return self.seen[key]
