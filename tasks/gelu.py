import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU activation (exact erf form), elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


# Sizes follow the evaluator's device (the kernels package sets KERNELS_DEVICE): GPU sizes run for
# about a millisecond on an H100, CPU sizes for a few milliseconds on two cores.
ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
batch_size, dim = (16384, 32768) if ON_GPU else (16, 1000) if INTERPRETED else (512, 4096)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
