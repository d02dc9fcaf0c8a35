"""y = x * sigmoid(x) + bias in Triton: one fused pass, one program per 128 elements.

Analysis: eager PyTorch runs three elementwise passes with two temporaries; one fused pass
reads x (and the bias, from cache) and writes y once. Small blocks leave each program
little work to hide memory latency with, and the column of each element is a modulo per
element: expect it ahead of eager by the fusion, short of fast.py's tiles (H100: 2.0x, 3.2x).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_bias_kernel(x_ptr, b_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % cols, mask=mask)
    tl.store(y_ptr + offs, x * tl.sigmoid(x) + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        swish_bias_kernel[(triton.cdiv(x.numel(), 128),)](x, self.bias, y, x.numel(), self.bias.numel(), BLOCK=128)
        return y
