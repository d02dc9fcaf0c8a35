"""3x3 conv (padding 1) + conv bias + extra channel bias, ReLU, scale: direct convolution, one thread per output.

Analysis: the convolution is 32 * 128 * 128^2 outputs x 64 * 9 taps = 38.7 G multiply-adds
(77 GFLOP) on a 128 MiB input and 256 MiB output. Each thread computes one output from scratch:
576 loads of x and 576 of the weights, with width as the fastest index so a warp's x loads are
coalesced along a row and the weight loads are broadcasts. Neighbouring outputs re-read the same
inputs (each x value is used by 9 * 128 outputs), which only the caches catch, so this is far from
the FMA peak. The bias, ReLU and scale are fused into the final store, which saves the three extra
passes eager PyTorch makes after cuDNN's convolution, but the convolution itself dominates: on an
H100 it took 11.2 ms against eager's 2.7 ms, about 4x slower.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
__global__ void conv3x3_bias_relu_scale(const float* __restrict__ x, const float* __restrict__ w,
        const float* __restrict__ cb, const float* __restrict__ bias, float* __restrict__ y,
        long B, long Ci, long Co, long H, long W, float scale) {
    long total = B * Co * H * W, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long ow = idx % W, oh = (idx / W) % H, co = (idx / (W * H)) % Co, n = idx / (W * H * Co);
        float acc = cb[co];
        for (long ci = 0; ci < Ci; ++ci) {
            const float* xp = x + (n * Ci + ci) * H * W;
            const float* wp = w + (co * Ci + ci) * 9;
            for (int kh = 0; kh < 3; ++kh) {
                long ih = oh + kh - 1;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < 3; ++kw) {
                    long iw = ow + kw - 1;
                    if (iw >= 0 && iw < W) acc += xp[ih * W + iw] * wp[kh * 3 + kw];
                }
            }
        }
        y[idx] = fmaxf(acc + bias[co], 0.0f) * scale;
    }
}

extern "C" void conv_bias_relu_scale(const float* x, const float* w, const float* cb, const float* bias,
        float* y, long B, long Ci, long Co, long H, long W, float scale, cudaStream_t stream) {
    long total = B * Co * H * W;
    if (total <= 0) return;
    long blocks = (total + 255) / 256;
    if (blocks > 1048576) blocks = 1048576;
    conv3x3_bias_relu_scale<<<(unsigned)blocks, 256, 0, stream>>>(x, w, cb, bias, y, B, Ci, Co, H, W, scale);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, Ci, H, W = x.shape
        Co = self.conv.out_channels
        y = torch.empty(B, Co, H, W, device=x.device, dtype=x.dtype)
        lib.conv_bias_relu_scale(x, self.conv.weight.contiguous(), self.conv.bias.contiguous(),
                                 self.bias.contiguous(), y, B, Ci, Co, H, W, float(self.scale))
        return y
