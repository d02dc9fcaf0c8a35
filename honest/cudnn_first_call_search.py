"""cuDNN's search for its convolution algorithms (cudnn.benchmark) in the first call: a deep
network's first forward tries every algorithm for each of its convolution shapes, tens of
seconds on an H100 for some published level-3 kernels, longer beside other workers. Here
3 s of convolutions in the first forward stand in for it, under a 0.5 s call deadline
(1.5 s for a first call): while the candidate's first call is inside a convolution module
with cudnn.benchmark on, the harness's watchdog extends the call's deadline, as it does for
a build or torch.compile. A hang anywhere else in a first call still ends at its deadline
(first_call_setup.py shows the deadline)."""
import time

import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "conv_bias_relu_scale"
SET_FLAGS = ["cudnn_benchmark"]
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0}

torch.backends.cudnn.benchmark = True
_searched = []  # cuDNN remembers its choices for the process, not for one model


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x):
        if not _searched:  # the search: convolutions of many shapes, once
            probe = nn.Conv3d(8, 8, 3).to(x.device)
            y = torch.randn(2, 8, 24, 24, 24, device=x.device)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 3.0:
                probe(y)
            _searched.append(True)
        return torch.relu(self.conv(x) + self.bias) * self.scale
