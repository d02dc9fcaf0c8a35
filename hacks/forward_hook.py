"""A forward hook that swaps the output for a stored one."""
import torch
import torch.nn as nn

EXPECT = "rejected/forward_hook"
TASK = "gelu"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.saved = None
        self.register_forward_hook(self._hook)

    def _hook(self, mod, args, out):
        if self.saved is None:
            self.saved = out
        return self.saved

    def forward(self, x):
        return torch.nn.functional.gelu(x)
