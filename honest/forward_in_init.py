"""Chooses its forward once, in __init__, as an instance attribute (self.forward =
self._fast): ordinary Python, and every instance has a bound method of its own. Rejected as
forward_rebound "during timing" before (the harness compared the instance it timed with the
last one it built)."""
import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "gelu"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.forward = self._fast

    def _fast(self, x):
        return torch.nn.functional.gelu(x)
