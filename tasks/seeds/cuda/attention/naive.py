"""softmax(Q K^T / sqrt(d)) V: three naive kernels (one thread per score, one per softmax row, one per output).

Analysis: with 16 * 16 heads of 1024 x 64, the score matrix is 256 x 1024 x 1024 floats (1 GiB),
written by the first kernel, read and rewritten by the softmax, then read by the third; the two
products are 34 GFLOP each. The score kernel gives consecutive threads consecutive keys j, so the
warp reads 32 rows of K 256 bytes apart (K^T is never built: k is indexed as k[j, d]); each thread
re-reads its query row and a key row from global memory with no shared-memory reuse. The softmax
gives one thread a whole 1024-long row (three serial passes, strided across the warp), and the
output kernel reads a probability row per thread. Eager PyTorch uses batched cuBLAS GEMMs plus a
scale pass and a softmax pass: on an H100 this took 92 ms against eager's 3.4 ms, 27x slower.
"""
import math

import torch
import torch.nn as nn

import kernels

SRC = r'''
// s[z, i, j] = sum_d q[z, i, d] * k[z, j, d]   (z = batch * heads)
__global__ void scores_k(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s,
                         long Z, long Sq, long Sk, long D) {
    long total = Z * Sq * Sk, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long j = idx % Sk, i = (idx / Sk) % Sq, z = idx / (Sk * Sq);
        const float* qi = q + (z * Sq + i) * D;
        const float* kj = k + (z * Sk + j) * D;
        float acc = 0.0f;
        for (long d = 0; d < D; ++d) acc += qi[d] * kj[d];
        s[idx] = acc;
    }
}

// each row of s (rows x cols) becomes softmax(row * scale), in place
__global__ void softmax_k(float* __restrict__ s, long rows, long cols, float scale) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long r = (long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        float* row = s + r * cols;
        float m = -INFINITY, sum = 0.0f;
        for (long c = 0; c < cols; ++c) m = fmaxf(m, row[c] * scale);
        for (long c = 0; c < cols; ++c) sum += expf(row[c] * scale - m);
        for (long c = 0; c < cols; ++c) row[c] = expf(row[c] * scale - m) / sum;
    }
}

// o[z, i, d] = sum_j p[z, i, j] * v[z, j, d]
__global__ void pv_k(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ o,
                     long Z, long Sq, long Sk, long D) {
    long total = Z * Sq * D, stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long d = idx % D, zi = idx / D, z = zi / Sq;
        const float* pi = p + zi * Sk;
        const float* vz = v + z * Sk * D + d;
        float acc = 0.0f;
        for (long j = 0; j < Sk; ++j) acc += pi[j] * vz[j * D];
        o[idx] = acc;
    }
}

static unsigned grid_for(long n) { long b = (n + 255) / 256; return (unsigned)(b > 1048576 ? 1048576 : b); }

extern "C" void attention(const float* q, const float* k, const float* v, float* s, float* o,
                          long Z, long Sq, long Sk, long D, float scale, cudaStream_t stream) {
    if (Z * Sq * Sk <= 0 || D <= 0) return;
    scores_k<<<grid_for(Z * Sq * Sk), 256, 0, stream>>>(q, k, s, Z, Sq, Sk, D);
    softmax_k<<<grid_for(Z * Sq), 256, 0, stream>>>(s, Z * Sq, Sk, scale);
    pv_k<<<grid_for(Z * Sq * D), 256, 0, stream>>>(s, v, o, Z, Sq, Sk, D);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        *lead, Sq, D = q.shape
        Sk = k.shape[-2]
        Z = q.numel() // (Sq * D)
        s = torch.empty(*lead, Sq, Sk, device=q.device, dtype=q.dtype)
        o = torch.empty_like(q)
        lib.attention(q, k, v, s, o, Z, Sq, Sk, D, 1.0 / math.sqrt(D))
        return o
