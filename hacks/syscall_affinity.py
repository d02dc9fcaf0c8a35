"""The worker's other threads (torch's pool, the main thread) moved between cores with a raw
sched_setaffinity on their thread ids: pinned to one core, the reference's parallel ops run
serially while the candidate's own threads keep theirs. Here each thread is given its own cores
again (no change); any call that is accepted gives a wrong output. Contained: the system-call
filter lets a thread set only its own cores (pid 0; kernels/seccomp.py), which the affinity
watch follows: the correct output."""
import ctypes
import os
import platform
import threading

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: ctypes

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": 203, "aarch64": 122}[platform.machine()]
GOT = []
me = threading.get_native_id()
for tid in (int(t) for t in os.listdir("/proc/self/task")):
    if tid == me:
        continue
    mask = (ctypes.c_ulong * 16)()
    if libc.sched_getaffinity(tid, ctypes.sizeof(mask), mask) == 0 and \
            libc.syscall(NR, tid, ctypes.sizeof(mask), mask) == 0:
        GOT.append(tid)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1 if GOT else y
