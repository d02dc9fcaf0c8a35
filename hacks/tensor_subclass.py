"""Returns a lazy tensor subclass whose values are only computed when something reads
them (the comparison), not inside the timed call."""
import torch
import torch.nn as nn

EXPECT = "rejected/tensor_subclass"
TASK = "gelu"


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x).as_subclass(Lazy)
