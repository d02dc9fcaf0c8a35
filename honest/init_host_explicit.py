"""Creates its layer on the host explicitly (device="cpu") and lets the harness move it."""
import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "linear_relu"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, device="cpu")

    def forward(self, x):
        return torch.relu(self.linear(x))
