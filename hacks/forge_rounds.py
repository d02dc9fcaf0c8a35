"""Rewrites the harness's record of its own earlier timing rounds from inside its timed calls:
the list of the candidate's per-round medians in run_timing's frame, reached by walking the
frames above its forward, each entry halved once. Its forward is plain GELU, the reference's
own work. Halving the rounds it could reach also widened the rounds' spread, and with it the
margin the second timer allows: on the code before, ok 1.96x on the CPU VM, "confirmed at
0.93x". Now the job tells the Evaluator each round's candidate time as soon as it is timed,
before the candidate runs again, and the verdict's time and spread come from that record:
ok at about 1x. Paired and apart, the worker's own figures are the verdict's (EVAL.md, "Known
limits"): there it gains."""
import sys

import torch
import torch.nn as nn

EXPECT = "ok"  # the Evaluator's record of the rounds, which it cannot reach: about 1x
MAX_SPEEDUP = 1.5
MAX_SPEEDUP_PAIRED = 1000.0  # --reference_timing=paired and apart: the worker's own figures stand
MAX_SPEEDUP_APART = 1000.0
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: frames
halved = set()


def _halve_earlier_rounds():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "run_timing":
            rn = f.f_locals.get("rn")
            if isinstance(rn, list):
                for i, x in enumerate(rn):
                    if (id(rn), i) not in halved:
                        halved.add((id(rn), i))
                        rn[i] = x * 0.5
            return
        f = f.f_back


class ModelNew(nn.Module):
    def forward(self, x):
        _halve_earlier_rounds()
        return torch.nn.functional.gelu(x)
