"""A cache keyed on a sample of the input's values: a miss is slow (the work, then 20 ms more),
a hit is free. The checks' input sets are all different, so it passes them; timing that
cycles through a few sets hits from the second pass on and reports a large speedup. Timing
now gives every call a set no call had before: every call misses, and the speedup shows it."""
import time

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
MAX_SPEEDUP = 1.0

_cache = {}


class ModelNew(nn.Module):
    def forward(self, x):
        key = tuple(x.flatten()[:16].tolist())
        if key not in _cache:
            time.sleep(0.02)
            _cache[key] = torch.nn.functional.gelu(x)
        return _cache[key].clone()
