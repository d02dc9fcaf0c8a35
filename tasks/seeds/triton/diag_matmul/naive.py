"""diag(a) @ B in Triton without the diagonal matrix: y[i, j] = a[i] * B[i, j], one
program per 128 elements.

Analysis: the reference builds an N x N diagonal matrix and runs a full matrix multiply
(N^3 multiply-adds, mostly by zero). Scaling each row of B by a[i] is one read and one write
of B: N^2 work, memory-bound. Even with small blocks and a division per element for its row,
expect it far ahead of the reference; fast.py tiles by rows.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(a_ptr, b_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs // cols, mask=mask)
    tl.store(y_ptr + offs, a * tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        B = B.contiguous()
        y = torch.empty_like(B)
        row_scale_kernel[(triton.cdiv(B.numel(), 128),)](a.contiguous(), B, y, B.numel(), B.shape[1], BLOCK=128)
        return y
