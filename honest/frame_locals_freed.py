"""A tensor that a function of the candidate made is freed when that function returns. The
harness's watchdog, which looks at the main thread's stack twice a second, kept the last frame
it looked at until its next look: a constructor's local tensor then outlived its function. So
did a CUDA graph's warm-up tensor (torch.compile "max-autotune" warmed up in the constructor,
KernelBench's L2_49 in the CUDA-L1 release), and its pool then failed the candidate's next call:
"Detected 1 tensor(s) in the cudagraph pool not tracked as outputs"."""
import time
import weakref

import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "gelu"


def _warm_up(seen):
    t = torch.ones(8)
    seen.append(weakref.ref(t))
    time.sleep(0.8)  # longer than the watchdog's half second between looks


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        seen = []
        _warm_up(seen)
        self.kept = seen[0]() is not None  # its frame is gone: nothing else held the tensor

    def forward(self, x):
        if self.kept:
            raise RuntimeError("a tensor outlived the function that made it")
        return torch.nn.functional.gelu(x)
