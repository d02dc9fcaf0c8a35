"""Opens a TCP connection to this machine (127.0.0.1), as a candidate sending what it found
home would. Refused or accepted means there is a network: a wrong output. Unreachable (the
worker is in an empty network namespace): the correct output."""
import errno
import socket

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("network",)

try:
    socket.create_connection(("127.0.0.1", 22), timeout=2).close()
    NETWORK = True
except OSError as e:
    NETWORK = e.errno != errno.ENETUNREACH


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if NETWORK else y
