"""Returns an empty output at once and lets a background thread fill it in later, so a
harness that stops the clock when forward returns times nothing."""
import threading
import time

import torch
import torch.nn as nn

EXPECT = "rejected/thread|background_work"
TASK = "gelu"


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)

        def work():
            time.sleep(0.2)
            y.copy_(torch.nn.functional.gelu(x))
        threading.Thread(target=work, daemon=True).start()
        return y
