"""Writes outside its work folder: a marker in /tmp (its own /tmp, where it has one: the test
checks the machine's /tmp has none after the job), a file in every folder that was in /tmp
before the job (there read-only), a file next to the project's code, and checks whether its
working directory is the project. Any of them landing: a wrong output. Contained (Landlock
confines writes to the work folder, the build cache and its own /tmp; the working directory
is the work folder): the correct output."""
import os

import kernels  # the evaluator's own package: its parent folder is the project
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("files",)

ESCAPED = []
try:
    with open("/tmp/cudal1_escaped_marker", "w") as f:  # contained, or refused
        f.write("escaped")
except OSError:
    pass
own = os.stat("/tmp").st_dev  # its own /tmp's folders (those of its work folder's path) aside
before = [os.path.join("/tmp", d) for d in os.listdir("/tmp")]
before = [d for d in before if os.path.isdir(d) and not os.path.islink(d) and os.stat(d).st_dev != own]
for path in [os.path.join(d, "cudal1_escaped_marker") for d in before[:50]] + \
        [os.path.join(os.path.dirname(os.path.dirname(kernels.__file__)), "cudal1_escaped_marker")]:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        ESCAPED.append(path)
        os.remove(path)
    except OSError:
        pass
if os.path.exists(os.path.join(os.getcwd(), "test_all.py")):
    ESCAPED.append("cwd is the project")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if ESCAPED else y
