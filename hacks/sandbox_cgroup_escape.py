"""A fork bomb (capped at 300) that first tries to leave its job's control group: it writes
its pid into the cgroup.procs of every group above its own, in every hierarchy mounted
(as root, which the worker is). The box allows writes only in its work folders, so the moves
are refused, the limit of 100 holds, and the verdict names it: runtime_error/process_limit."""
import os
import time

import torch
import torch.nn as nn

EXPECT = "runtime_error/process_limit"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
OPTIONS = {"max_processes": 100}
NEEDS = ("process count", "files")


def escape():
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        if right.split()[0] in ("cgroup", "cgroup2"):
            mount = left.split()[4]
            for up in (mount, os.path.dirname(mount)):
                for root, dirs, files in os.walk(up):
                    if "cgroup.procs" in files and "cudal1-" not in root:
                        try:
                            with open(os.path.join(root, "cgroup.procs"), "w") as f:
                                f.write(str(os.getpid()))
                        except OSError:
                            pass
                    dirs[:] = []  # the top of the hierarchy only


class ModelNew(nn.Module):
    started = False

    def forward(self, x):
        if not ModelNew.started:
            ModelNew.started = True
            escape()
            for _ in range(300):
                try:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                except OSError:
                    pass
        return torch.nn.functional.gelu(x)
