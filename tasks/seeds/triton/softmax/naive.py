"""Row softmax in Triton: one program per row, three passes over it (max, sum, write).

Analysis: each row is read three times (its maximum, the sum of exponentials, then the
output) and written once, 128 columns at a time. Eager PyTorch reads it about twice; expect
this slower, by the extra pass and the narrow blocks. fast.py keeps a running maximum.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * cols
    out = y_ptr + tl.program_id(0) * cols
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(row + c, mask=c < cols, other=float("-inf")))
    top = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        s += tl.exp(tl.load(row + c, mask=c < cols, other=float("-inf")) - top)
    total = tl.sum(s, axis=0)
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
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=128)
        return y
