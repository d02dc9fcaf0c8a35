"""Conv2d 3 x 3 (padding 1), + bias, ReLU, * scale in Triton, unfused: a direct convolution
kernel (blocks of 128 pixels x 32 output channels), then a second kernel for bias, ReLU and
scale over its output.

Analysis: the convolution dominates, and a direct convolution on the CUDA cores in exact
fp32 does not match cuDNN's tuned kernels; the epilogue is a second pass over the output
(read and write), as in eager PyTorch. Expect it behind eager and behind fast.py, which
applies the epilogue in registers.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv3x3_kernel(x_ptr, w_ptr, cb_ptr, b_ptr, y_ptr, C, H, W, OC, scale,
                   BP: tl.constexpr, BO: tl.constexpr, EPILOGUE: tl.constexpr):
    """3 x 3 convolution, padding 1, stride 1, for one image (program axis 2), a block of BP
    output pixels and BO output channels: each input value loaded is multiplied into all BO
    channels (an outer product per tap), fp32 throughout. EPILOGUE 1: + conv bias + bias,
    ReLU, * scale in registers; 0: + conv bias only."""
    n = tl.program_id(2)
    p = tl.program_id(0) * BP + tl.arange(0, BP)
    o = tl.program_id(1) * BO + tl.arange(0, BO)
    oh = p // W
    ow = p % W
    pm = p < H * W
    om = o < OC
    acc = tl.zeros([BP, BO], dtype=tl.float32)
    for c in range(0, C):
        for kh in tl.static_range(3):
            for kw in tl.static_range(3):
                ih = oh + kh - 1
                iw = ow + kw - 1
                xm = pm & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                xv = tl.load(x_ptr + ((n * C + c) * H + ih) * W + iw, mask=xm, other=0.0)
                wv = tl.load(w_ptr + ((o * C + c) * 3 + kh) * 3 + kw, mask=om, other=0.0)
                acc += xv[:, None] * wv[None, :]
    acc += tl.load(cb_ptr + o, mask=om, other=0.0)[None, :]
    if EPILOGUE == 1:
        acc = tl.maximum(acc + tl.load(b_ptr + o, mask=om, other=0.0)[None, :], 0.0) * scale
    tl.store(y_ptr + (n * OC + o[None, :]) * H * W + p[:, None], acc, mask=pm[:, None] & om[None, :])


@triton.jit
def bias_relu_scale_kernel(y_ptr, b_ptr, hw, oc, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(b_ptr + (offs // hw) % oc, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(tl.load(y_ptr + offs, mask=mask) + b, 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        oc = self.conv.out_channels
        y = torch.empty(n, oc, h, w, dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(h * w, 128), triton.cdiv(oc, 32), n)
        conv3x3_kernel[grid](x, self.conv.weight, self.conv.bias, self.bias, y, c, h, w, oc, self.scale,
                             BP=128, BO=32, EPILOGUE=0, num_warps=4)
        bias_relu_scale_kernel[(triton.cdiv(y.numel(), 1024),)](y, self.bias, h * w, oc, y.numel(), self.scale,
                                                                 BLOCK=1024)
        return y
