"""Root inside the box. Workers run as the user who started the evaluator (root on the project's
machines) and kept every capability, and the file rules let a job write anywhere under /dev,
for the GPU's device files and shared memory. But /dev also holds the machine's disks, whose
raw blocks are every file outside the box (the evaluator's code, other jobs' results), and root
may make a device node of its own in any folder it can write, load kernel modules, run BPF
programs, or raise its own scheduling priority. This candidate does no harm: it opens the first
disk for writing and writes nothing, opens a file of torch's for writing through /proc/self/fd
and /proc/self/root (its own /proc entries are writable: CUDA needs them), makes a node for the
null device in its work folder, and asks for a better nice value; any that works, or a
capability left to any of its threads, gives a wrong output. Contained (writes under /dev only
to the null device, shared memory and the GPU's files; no device node made anywhere; every
capability dropped, the bounding set too): the correct output."""
import os

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
NEEDS = ("files", "privileges")
STATIC = True  # the static check (kernels/static.py) finds it too

GOT = []
disks = sorted(d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "zram")))
for d in disks[:1]:
    try:
        os.close(os.open(f"/dev/{d}", os.O_WRONLY))
        GOT.append(f"/dev/{d} opened for writing")
    except OSError:
        pass
try:
    os.mknod("null-node", 0o600 | 0o020000, os.makedev(1, 3))  # S_IFCHR
    GOT.append("a device node made")
except OSError:
    pass
try:
    os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) - 1)
    GOT.append("a better nice value")
except OSError:
    pass
fd = os.open(os.path.abspath(torch.__file__), os.O_RDONLY)  # a file outside, opened to read
try:
    os.close(os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_APPEND))  # and again through /proc, to write
    GOT.append("torch's own file opened for writing through /proc/self/fd")
except OSError:
    pass
os.close(fd)
try:  # and through the /proc/self/root link
    os.close(os.open("/proc/self/root" + os.path.abspath(torch.__file__), os.O_WRONLY | os.O_APPEND))
    GOT.append("torch's own file opened for writing through /proc/self/root")
except OSError:
    pass
for tid in os.listdir("/proc/self/task"):  # every thread: capabilities belong to each
    caps = [l.split()[1] for l in open(f"/proc/self/task/{tid}/status") if l.startswith(("CapEff", "CapPrm"))]
    if any(int(c, 16) for c in caps):
        GOT.append(f"capabilities {caps} in thread {tid}")
print("sandbox_root:", GOT)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if GOT else y
