"""y = x * sigmoid(x) + bias in Triton: one fused pass over 2-D tiles of rows and columns.

Analysis: one read of x and one write of y (eager: three passes, two temporaries), so the
bound is memory speed at a third of eager's traffic. Each program takes a tile of 16 rows
by 256 columns: the bias slice is loaded once per tile and broadcast over its rows, and no
element needs a modulo for its column. Expect well ahead of eager PyTorch and of naive.py.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_bias_kernel(x_ptr, b_ptr, y_ptr, rows, cols, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + c, mask=c < cols)
    tl.store(y_ptr + offs, x * tl.sigmoid(x) + b[None, :], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = self.bias.numel()
        rows = x.numel() // cols
        grid = (triton.cdiv(rows, 16), triton.cdiv(cols, 256))
        swish_bias_kernel[grid](x, self.bias, y, rows, cols, BR=16, BC=256)
        return y
