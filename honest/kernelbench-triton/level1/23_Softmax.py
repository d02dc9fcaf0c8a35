"""KernelBench level 1, problem 23 (softmax over rows of 393,216) in Triton: one program a
row, an online maximum and sum in one pass, then the write pass.

Rows far too long for registers: the running maximum is kept per lane with the sum rescaled
whenever it grows, so the statistics take one read of the row; the second pass reads it
again and writes. Two reads and one write, as eager's kernel does; expect near eager.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    start_of_row = tl.program_id(0).to(tl.int64) * cols
    row, out = x_ptr + start_of_row, y_ptr + start_of_row
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(row + c, mask=c < cols, other=float("-inf"))
        new = tl.maximum(m, x)
        s = tl.where(new == float("-inf"), 0.0, s * tl.exp(m - new) + tl.exp(x - new))  # lanes with nothing yet add 0
        m = new
    top = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - top)), axis=0)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(row + c, mask=c < cols, other=float("-inf"))
        tl.store(out + c, tl.exp(x - top) / total, mask=c < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=4096, num_warps=16)
        return y
