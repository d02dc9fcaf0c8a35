"""Ends the process from inside forward, skipping every handler."""
import os

import torch.nn as nn

EXPECT = "runtime_error/exit"
TASK = "gelu"


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(0)
