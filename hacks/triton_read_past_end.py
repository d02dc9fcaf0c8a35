"""A Triton GELU with an off-by-one mask: its neighbour load reads one element past the end
of the input (a stencil written as x[i] + 0 * x[i + 1]). Whatever lay past the end would
decide the verdict; every checked input is fenced with NaN, so the last output is NaN every
time, on the GPU and through the interpreter alike."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

EXPECT = "incorrect/nan"
TASK = "gelu"
OPTIONS = {"language": "triton", "require_kernel": True}


@triton.jit
def gelu_peek_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    nxt = tl.load(x_ptr + offs + 1, mask=mask)  # x[n] for the last element: past the end
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)) + 0.0 * nxt, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        gelu_peek_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        return y
