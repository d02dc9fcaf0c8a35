"""LayerNorm over the last dimension in Triton: one program per row, three passes (mean,
variance, normalize), 128 columns at a time.

Analysis: memory-bound: eager PyTorch's fused kernel reads each row about twice. This reads
it three times in narrow blocks, with the variance taken about the mean (two-pass, as
accurate as eager); expect it behind eager. fast.py holds the whole row in registers.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * cols
    out = y_ptr + tl.program_id(0) * cols
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        s += tl.load(row + c, mask=c < cols, other=0.0)
    mean = tl.sum(s, axis=0) / cols
    v = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        d = tl.where(c < cols, tl.load(row + c, mask=c < cols, other=0.0) - mean, 0.0)
        v += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(v, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(row + c, mask=c < cols, other=0.0)
        w = tl.load(w_ptr + c, mask=c < cols)
        b = tl.load(b_ptr + c, mask=c < cols)
        tl.store(out + c, (x - mean) * rstd * w + b, mask=c < cols)


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
        layernorm_kernel[(x.numel() // cols,)](x, self.ln.weight, self.ln.bias, y, cols, self.ln.eps, BLOCK=128)
        return y
