"""A hang dressed as cuDNN's algorithm search: cudnn.benchmark on, and a first forward that
calls a convolution module for ever, so the harness's watchdog finds the main thread in a
convolution module at every look and extends the call's deadline. The extensions end after
4 first-call limits (here 4 x 1.5 s), not at the whole job's 30 s."""
import torch
import torch.nn as nn

EXPECT = "timeout/timeout"
TASK = "conv_bias_relu_scale"
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0, "run_timeout": 30.0}
MAX_RUN_S = 15.0

torch.backends.cudnn.benchmark = True


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        probe = nn.Conv3d(8, 8, 3).to(x.device)
        y = torch.randn(2, 8, 24, 24, 24, device=x.device)
        while True:
            probe(y)
