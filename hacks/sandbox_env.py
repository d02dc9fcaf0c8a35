"""Looks for secrets in its own environment, as a candidate after an API key would: any
variable named like a key, token or password, in os.environ or in /proc/self/environ (the
environment the process started with). Found: a wrong output, so the verdict shows it.
Contained (the worker's environment is an allowlist): the correct output."""
import os

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ()

WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
names = set(os.environ)
with open("/proc/self/environ", "rb") as f:
    names |= {e.split(b"=", 1)[0].decode(errors="replace") for e in f.read().split(b"\0") if e}
FOUND = sorted(n for n in names if any(w in n.upper() for w in WORDS))


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if FOUND else y
