import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, with learned scale and shift."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        # Non-trivial affine parameters, so a kernel that ignores them fails the check.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
batch_size, dim = (65536, 4096) if ON_GPU else (32, 1000) if INTERPRETED else (2048, 1024)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2 + 1]


def get_init_inputs():
    return [dim]
