"""GELU (exact erf form) in Triton: one program per 4,096 elements, four warps.

Analysis: the work is one read and one write per element, so the kernel should run at
memory speed. Blocks of 4,096 give each program enough independent loads in flight to
cover the memory latency, and far fewer programs to schedule than naive.py's 128; erf is
cheap next to the memory traffic. Expect about eager PyTorch's speed: both are one pass.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        gelu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=4)
        return y
