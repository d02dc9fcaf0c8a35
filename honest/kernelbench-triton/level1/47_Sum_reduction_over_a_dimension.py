"""KernelBench level 1, problem 47 (sum over the middle dimension, kept) in Triton: one
program a batch entry and strip of 256 columns, walking down the rows.

Each program reads contiguous strips of its rows (coalesced) and keeps 256 running sums in
fp32 registers; one read of the input, a tiny write. The reduced dimension is whichever the
model was built with: the input is viewed as (before, along, after).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_middle_kernel(x_ptr, y_ptr, along, after, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < after
    base = x_ptr + b * along * after + cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(0, along):
        acc += tl.load(base + r * after, mask=mask, other=0.0)
    tl.store(y_ptr + b * after + cols, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        d = self.dim % x.dim()
        before, along, after = math.prod(x.shape[:d]), x.shape[d], math.prod(x.shape[d + 1:])
        y = torch.empty(*x.shape[:d], 1, *x.shape[d + 1:], dtype=x.dtype, device=x.device)
        sum_middle_kernel[(before, triton.cdiv(after, 256))](x, y, along, after, BLOCK=256, num_warps=4)
        return y
