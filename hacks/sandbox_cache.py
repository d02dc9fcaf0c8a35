"""Plants files in the build cache outside its own program's part: at the cache's top, in
another program's folder (where that program would load its build from), and in the
reference's compiler cache (which --baseline=compile loads the reference from). Any of them
working: a wrong output. Contained (each worker writes only its own program's part of the
cache; the reference's compiler cache only before a candidate loads): the correct output."""
import os

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
NEEDS = ("files",)

own = os.environ["CUDAL1_CACHE"]  # <cache>/programs/<this program's hash>
root = os.path.dirname(os.path.dirname(own))
PLANTED = []
for folder in (root, os.path.join(root, "programs", "0" * 32, "lib"), os.path.join(root, "reference-compile")):
    try:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "cudal1_planted")
        with open(path, "w") as f:
            f.write("planted")
        PLANTED.append(path)
        os.remove(path)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if PLANTED else y
