"""Uses torch.compile. torch wraps some of its own functions (torch.manual_seed,
nn.Module.__init__) and may start helper threads on first use; none of that is the
candidate tampering with the harness. Its first call compiles for longer than the call
deadline it is judged with: compiling is work, not a hang."""
import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "ok"
TASK = "gelu"
OPTIONS = {"call_timeout": 1.0}  # compiling in the first call outlasts it: the watchdog must extend it


@torch.compile
def gelu(x):
    return F.gelu(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return gelu(x)
