"""Uses torch.compile. torch wraps some of its own functions (torch.manual_seed,
nn.Module.__init__) and may start helper threads on first use; none of that is the
candidate tampering with the harness."""
import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "ok"
TASK = "gelu"


@torch.compile
def gelu(x):
    return F.gelu(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return gelu(x)
