"""Row sums (B, N) -> (B, 1) in Triton: one program per row, one warp, 16 columns at a time.

Analysis: a reduction that reads every element once: memory-bound. One warp per row walking
it 16 columns (64 bytes) per step keeps very few loads in flight, so each row's time is
thousands of memory latencies in a row: expect it behind eager PyTorch's reduction (H100:
0.72x); fast.py reads 2,048 columns per step with eight warps (0.98x).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, 1, dtype=x.dtype, device=x.device)
        row_sum_kernel[(rows,)](x, y, cols, BLOCK=16, num_warps=1)
        return y
