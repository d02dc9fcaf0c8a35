"""Writes outside its work folder: a marker in /tmp, a file next to the project's code, and
checks whether its working directory is the project. Any of them working: a wrong output.
Contained (Landlock confines writes to the work folder and the build cache; the working
directory is the work folder): the correct output."""
import os

import kernels  # the evaluator's own package: its parent folder is the project
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("files",)

ESCAPED = []
for path in ("/tmp/cudal1_escaped_marker", os.path.join(os.path.dirname(os.path.dirname(kernels.__file__)), "cudal1_escaped_marker")):
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
