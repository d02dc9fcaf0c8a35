"""A Triton swish-plus-bias that writes its result into the input's memory and hands the
input back, to save an allocation: the caller's tensor is changed."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

EXPECT = "rejected/input_mutated"
TASK = "swish_bias"
OPTIONS = {"language": "triton", "require_kernel": True}


@triton.jit
def swish_bias_inplace_kernel(x_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % cols, mask=mask)
    tl.store(x_ptr + offs, x * tl.sigmoid(x) + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        n = x.numel()
        swish_bias_inplace_kernel[(triton.cdiv(n, 4096),)](x, self.bias, n, x.shape[-1], BLOCK=4096)
        return x
