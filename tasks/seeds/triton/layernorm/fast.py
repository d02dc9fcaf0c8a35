"""LayerNorm over the last dimension in Triton: one program per row, the whole row held in
registers, so it is read once.

Analysis: memory-bound. The row (1,024 or 4,096 floats) fits one block: one read gives the
mean and the variance about it, and the normalized row is written from registers, one
read and one write in all against eager's two reads. Expect it at or ahead of eager
PyTorch, and ahead of naive.py's three passes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + tl.program_id(0) * cols + c, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / cols + eps)
    w = tl.load(w_ptr + c, mask=mask)
    b = tl.load(b_ptr + c, mask=mask)
    tl.store(y_ptr + tl.program_id(0) * cols + c, d * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        layernorm_kernel[(x.numel() // cols,)](x, self.ln.weight, self.ln.bias, y, cols, self.ln.eps,
                                               BLOCK=triton.next_power_of_2(cols), num_warps=8)
        return y
