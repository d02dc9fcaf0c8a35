"""Returns the input tensor itself for a ReLU: the task's inputs come from torch.rand, so they
are already non-negative and the answer is right with no work done (was ok 250x, flagged only
as reused_output). Rejected: an output in an input's own storage, where the reference makes a
new tensor."""
import torch.nn as nn

EXPECT = "incorrect/mismatch"  # on the built-in gelu it is simply wrong; test_all.py runs it on
TASK = "gelu"                  # a ReLU of torch.rand, where it is right: rejected/aliased_input


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        return x
