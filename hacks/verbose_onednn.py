"""Turns oneDNN's verbose mode on at import and off inside its own calls: every convolution
of the reference then prints a line as it runs (a larger convolution took 13.7 ms, then
31.6 ms, in a quick loop), its own, the same convolution, does not: ok 1.12x and 1.14x on
the CPU VM's small task before. torch can set this mode but
not read it back, so the harness turns it off after each candidate call and before each
reference call: the candidate's setting applies to its own calls only."""
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "conv_bias_relu_scale"
MAX_SPEEDUP = 1.5
torch._C._verbose.mkldnn_set_verbose(2)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x):
        torch._C._verbose.mkldnn_set_verbose(0)
        try:
            return torch.relu(self.conv(x) + self.bias) * self.scale
        finally:
            torch._C._verbose.mkldnn_set_verbose(2)
