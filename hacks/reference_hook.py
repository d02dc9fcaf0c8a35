"""Finds the reference's model among the live objects (gc) at its first call and registers a
forward pre-hook on it that spins 0.5 ms: the reference pays it on every timed call, its own
forward (the same MLP) does not. No global hook, no class method and no torch function
changes: ok 1.96x and 1.87x on the CPU VM before."""
import gc
import time

import torch
import torch.nn as nn

EXPECT = "rejected/reference_changed"
TASK = "mlp"
STATIC = True  # the static check (kernels/static.py) finds it too: gc.get_objects (a computed name would not be)
seen = set()


def slow(module, args):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.0005:
        pass


def hook_references():
    for o in gc.get_objects():
        if isinstance(o, nn.Module) and type(o).__name__ == "Model" and id(o) not in seen:
            seen.add(id(o))
            o.register_forward_pre_hook(slow)


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.hooked = False

    def forward(self, x):
        if not self.hooked:
            self.hooked = True
            hook_references()
        return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))
