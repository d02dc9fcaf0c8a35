"""Reaches other jobs and leaves something behind: lists the evaluator's folder of job folders
(another candidate's source came back this way), the other programs' builds in the cache, the
project's saved results, and writes a file in /dev/shm meant to outlive the job. Seeing any:
a wrong output. Contained: those folders are covered in the worker's own mounts (its own
folders bound back), and its /dev/shm is its own, gone with the job (test_all.py checks)."""
import os

import kernels
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("private mounts",)

SEEN = []
own = os.path.basename(os.getcwd())
jobs = os.path.dirname(os.getcwd())
SEEN += [n for n in os.listdir(jobs) if n != own]
cache = os.environ.get("CUDAL1_CACHE", "")
programs = os.path.dirname(cache)
if os.path.isdir(programs):
    SEEN += [n for n in os.listdir(programs) if n != os.path.basename(cache)]
results = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(kernels.__file__))), "results")
if os.path.isdir(results):
    SEEN += os.listdir(results)
with open("/dev/shm/cudal1_left_behind", "w") as f:
    f.write("still here")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1 if SEEN else y
