"""KernelBench level 1, problem 19 (ReLU) in Triton: one pass, 4,096 elements a program.

Memory-bound: one read and one write of each element, as eager PyTorch's kernel does; 64-bit
offsets, since the problem's 1.6 billion elements come within 20% of 2^31. Expect it about
level with eager.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=8)
        return y
