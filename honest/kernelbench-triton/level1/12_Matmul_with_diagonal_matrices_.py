"""KernelBench level 1, problem 12 (diag(A) @ B, written as A[:, None] * B) in Triton: each
program scales a 4,096-element strip of one row of B by that row's entry of A.

One read of B and one write; A's entry is loaded once a program. Eager PyTorch's broadcast
multiply does the same work, so expect it about level.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(a_ptr, b_ptr, c_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    scale = tl.load(a_ptr + row)
    tl.store(c_ptr + row * cols + c, scale * tl.load(b_ptr + row * cols + c, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.contiguous(), B.contiguous()
        C = torch.empty_like(B)
        row_scale_kernel[(B.shape[0], triton.cdiv(B.shape[1], 4096))](A, B, C, B.shape[1], BLOCK=4096, num_warps=8)
        return C
