"""3x3 conv + channel bias, ReLU, scale: library convolution (oneDNN), then ONE fused in-place epilogue.

Analysis: the convolution stays with oneDNN through F.conv2d (which also adds the
conv's own bias); what is fused is the rest. Eager PyTorch follows the conv with three more
passes over the 512 KiB output (+ bias, relu, * scale), each allocating a new tensor; here a
single vectorized kernel does all three in place, one read and one write, with the channel bias
loaded once per plane. The conv is most of the time, so expect a modest gain over eager,
and many times naive.py's speed.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels

SRC = r'''
// y[plane, :] = relu(y + bias[plane % C]) * scale, in place; a plane is one (n, c) image of hw floats.
extern "C" void bias_relu_scale(float* __restrict__ y, const float* __restrict__ bias,
                                long planes, long hw, long C, float scale) {
    #pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; ++p) {
        float b = bias[p % C];
        float* yp = y + p * hw;
        #pragma omp simd simdlen(16)
        for (long i = 0; i < hw; ++i) {
            float v = yp[i] + b;
            yp[i] = (v > 0.0f ? v : 0.0f) * scale;
        }
    }
}
'''
lib = kernels.load_cpp(SRC)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x.contiguous(), self.conv.weight, self.conv.bias, padding=1).contiguous()
        N, C, H, W = y.shape
        lib.bias_relu_scale(y, self.bias.contiguous(), N * C, H * W, C, float(self.scale))
        return y
