"""A child process started with a raw fork, which stops and resumes its parent (SIGSTOP,
SIGCONT) while the reference runs: the worker frozen for part of every reference call, never
during the candidate's. Here the child only sends a SIGCONT (harmless to a running parent);
its getting through gives a wrong output. The fork itself is
allowed (builds start compilers from inside candidate calls), but the child inherits the
system-call filter, which lets the kill family send only 0 and SIGKILL (kernels/seccomp.py):
the correct output."""
import ctypes
import mmap
import os
import platform

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: ctypes

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS = {"x86_64": dict(clone=56, kill=62), "aarch64": dict(clone=220, kill=129)}[platform.machine()]
shared = mmap.mmap(-1, 1)  # MAP_SHARED | MAP_ANONYMOUS: the child's answer
parent = os.getpid()
pid = libc.syscall(SYS["clone"], 17, 0, 0, 0, 0)  # clone(SIGCHLD): fork, as a raw system call
if pid == 0:
    shared[0] = 1 if libc.syscall(SYS["kill"], parent, 18) == 0 else 2  # SIGCONT
    os._exit(0)
os.waitpid(pid, 0)
GOT = shared[0] == 1


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1 if GOT else y
