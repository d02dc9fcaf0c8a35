"""KernelBench level 1, problem 88 (minGPT's tanh GELU) in Triton: the whole formula in one
pass.

Eager PyTorch runs the expression as about seven elementwise kernels, each reading and
writing the whole tensor; here each element is read once and written once. The identity
0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), needs one exponential.
Expect several times eager's speed.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    u2 = 1.5957691216057308 * (x + 0.044715 * x * x * x)  # 2 sqrt(2/pi) (x + 0.044715 x^3)
    tl.store(y_ptr + offs, x * tl.sigmoid(u2), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        gelu_tanh_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=8)
        return y
