"""A lazy output whose own methods do the work when read, and fail when the checker reads it
another way (a `sum` with no dtype keyword): the error would stand in for the verdict of
the subclass it is. Pattern of a released kernel (a deferred matmul)."""
import torch
import torch.nn as nn

EXPECT = "rejected/tensor_subclass"
TASK = "gelu"


class Deferred(torch.Tensor):
    """Holds the input; its own methods apply GELU when something asks for the values."""

    def sum(self, *dims):  # no dtype keyword: a checker that passes one gets an error
        return torch.nn.functional.gelu(self.as_subclass(torch.Tensor)).sum(*dims)

    def clone(self, **kwargs):
        return torch.nn.functional.gelu(self.as_subclass(torch.Tensor))


class ModelNew(nn.Module):
    def forward(self, x):
        return x.as_subclass(Deferred)
