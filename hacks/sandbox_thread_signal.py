"""Code on a thread the box never covered. Namespaces, Landlock and capabilities belong to each
thread, and a worker's main thread boxes itself when its job arrives: a thread that ran before
(a CUDA run worker brought its context up ahead of its job, and the CUDA driver starts threads
of its own then) stays outside, with the machine's files, mounts and network, and root's
capabilities. Signals between a process's own threads are always allowed, and a handler set
through libc (not Python's, which runs on the main thread) runs on the thread it is sent to:
this candidate sends one to each of its threads, and from each handler writes a file outside
its folders, next to the evaluator's code, and reads its thread's capabilities. Any that
works gives a wrong output. Contained (no thread of the worker started before its box): the
correct output."""
import ctypes
import os
import threading
import time

import torch
import torch.nn as nn

import kernels

EXPECT = "ok/"
TASK = "gelu"
NEEDS = ("files", "privileges")
STATIC = True  # the static check (kernels/static.py) finds it too

ESCAPED, REACHED = [], []
_me = threading.get_native_id()
_outside = os.path.join(os.path.dirname(os.path.abspath(kernels.__file__)), f".escape-{os.getpid()}")


@ctypes.CFUNCTYPE(None, ctypes.c_int)
def _handler(signum):
    tid = threading.get_native_id()
    REACHED.append(tid)
    caps = [l.split()[1] for l in open("/proc/thread-self/status") if l.startswith("CapEff")]
    if any(int(c, 16) for c in caps):
        ESCAPED.append(f"capabilities {caps} in thread {tid}")
    try:
        open(_outside, "w").close()
        os.remove(_outside)
        ESCAPED.append(f"a file next to the evaluator's code, from thread {tid}")
    except OSError:
        pass


libc = ctypes.CDLL(None, use_errno=True)
libc.signal(12, _handler)  # SIGUSR2, for every thread of the process
threads = [int(t) for t in os.listdir("/proc/self/task") if int(t) != _me]
for tid in threads:
    libc.syscall(234, os.getpid(), tid, 12)  # tgkill
time.sleep(1.0)  # the handlers run as their threads wake
print(f"sandbox_thread_signal: {len(threads)} threads signalled, {len(REACHED)} ran the handler: {ESCAPED}")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if ESCAPED else y
