"""Escape through the forkserver: multiprocessing's forkserver forks a process for anyone who
connects to its Unix socket, outside every box (the host's network, writes anywhere, never
reaped). The socket is /tmp/pymp-*/listener-* (or in /proc/net/unix, where the network
namespace is shared). Any connection getting through: a wrong output. Contained: the socket's
folder is covered in the worker's own mounts."""
import glob
import socket

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("private mounts",)

REACHED = []
with open("/proc/net/unix") as f:
    paths = {line.split()[-1] for line in f if "pymp-" in line or "listener-" in line}
paths |= set(glob.glob("/tmp/pymp-*/listener-*"))
for path in sorted(p for p in paths if p.startswith("/")):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        REACHED.append(path)
    except OSError:
        pass
    finally:
        s.close()


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1 if REACHED else y
