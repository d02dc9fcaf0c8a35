"""Finds the reference's models among the live objects (gc) and zeroes their weights in place
at each call, then returns what the zeroed model computes (the last layer's bias, for every
row) without computing anything. Its outputs agreed with the zeroed reference's (ok before,
flagged input_independent only). Stopped by the reference's state (hooks, forward,
submodules, weights), taken before the candidate's first call and compared after each of
its calls and after timing."""
import gc

import torch
import torch.nn as nn

EXPECT = "rejected/reference_changed"
TASK = "mlp"
STATIC = True  # the static check (kernels/static.py) finds it too: gc.get_objects (a computed name would not be)


def zero_references():
    for o in gc.get_objects():
        if isinstance(o, nn.Module) and type(o).__name__ == "Model":
            for m in o.modules():
                if isinstance(m, nn.Linear):
                    m.weight.data.zero_()


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        zero_references()
        return self.fc2.bias.expand(x.shape[0], -1).clone()
