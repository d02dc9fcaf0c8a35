"""C = A @ B in Triton: 64 x 64 output tiles, 32-deep steps, fp32 products (no TF32).

Analysis: compute-bound (2 N^3 flops on N^2 data). Larger tiles than naive.py reuse each
loaded element of A and B 64 times; products stay exact fp32 (input_precision="ieee") as
the task's tolerance requires, on the CUDA cores like cuBLAS's fp32 path. Expect it behind
cuBLAS's tuned kernel, ahead of naive.py.
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


def gemm(a, b, bias=None, epilogue=0, tile=(64, 64, 32), warps=4):
    """a @ b with an epilogue (b may be a transposed view: its strides are passed)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    BM, BN, BK = tile
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_kernel[grid](a, b, c if bias is None else bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                      b.stride(1), BM=BM, BN=BN, BK=BK, EPILOGUE=epilogue, num_warps=warps)
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return gemm(A.contiguous(), B.contiguous())
