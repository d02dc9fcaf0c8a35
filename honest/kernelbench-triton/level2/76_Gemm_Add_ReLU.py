"""KernelBench level 2, problem 76 (x @ W^T, + bias, ReLU) in Triton: one GEMM with the bias
and ReLU applied to each 64 x 64 output tile in registers.

The GEMM dominates; fusing saves eager's two extra passes over the output. Products are
exact fp32 (input_precision="ieee", no TF32), as the fp32 reference computes them, so the
GEMM runs on the CUDA cores while cuBLAS's does too: expect it behind eager, whose GEMM is
better tuned than this plain tiling.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_bias_relu_kernel(a_ptr, w_ptr, bias_ptr, c_ptr, M, N, K,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[M, N] = relu(A[M, K] @ W[N, K]^T + bias[N]), W read transposed through its strides."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    acc = tl.maximum(acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :], 0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, w = x.contiguous(), self.gemm.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty(M, N, dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        gemm_bias_relu_kernel[grid](x, w, self.bias, y, M, N, K, BM=64, BN=64, BK=32, num_warps=4)
        return y
