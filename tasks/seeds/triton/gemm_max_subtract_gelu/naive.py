"""Linear, row max, minus its mean, GELU in Triton, computed as written: the GEMM (bias
fused), then one program per row for max, subtract and GELU.

Analysis: after max(dim=1, keepdim=True) each row holds one value m whose mean is m, so the
output is gelu(0) = 0 whatever the input; this version does not use that and pays the GEMM
(exact fp32 products, 32 x 32 tiles) like the reference: expect it behind eager. fast.py
writes the zeros.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EPILOGUE: tl.constexpr):
    """C[M, N] = A[M, K] @ B[K, N] (strides given, so B may be a weight read transposed),
    accumulated in fp32 with fp32 products (input_precision="ieee": no TF32), then the
    epilogue on the tile in registers: 0 none, 1 + bias then ReLU, 2 + bias then GELU (tanh
    form), 3 + bias."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    if EPILOGUE != 0:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if EPILOGUE == 1:
        acc = tl.maximum(acc, 0.0)
    if EPILOGUE == 2:  # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def max_sub_gelu_kernel(y_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(y_ptr + row * cols + c, mask=c < cols, other=float("-inf")))
    top = tl.max(m, axis=0)
    d = top - top  # the mean over the kept one-element dimension is the value itself
    tl.store(out_ptr + row, 0.5 * d * (1.0 + tl.erf(d * 0.7071067811865476)))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, K = x.shape
        w = self.gemm.weight.t()
        N = w.shape[1]
        y = torch.empty(M, N, dtype=x.dtype, device=x.device)
        gemm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, w, self.gemm.bias, y, M, N, K, x.stride(0), x.stride(1),
                                                               w.stride(0), w.stride(1), BM=32, BN=32, BK=16,
                                                               EPILOGUE=3, num_warps=2)
        out = torch.empty(M, 1, dtype=x.dtype, device=x.device)
        max_sub_gelu_kernel[(M,)](y, out, N, BLOCK=1024)
        return out
