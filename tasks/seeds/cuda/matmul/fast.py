"""C = A @ B: shared-memory tiled SGEMM, 128x128 block tile, 8-deep K slices, 8x8 outputs per thread.

Analysis: 2 * 4096^3 = 137 GFLOP on 192 MiB of data: the work is FMA-bound once data is reused.
Each 256-thread block stages a 128x8 slice of A (transposed) and an 8x128 slice of B in shared
memory, and each thread keeps an 8x8 block of C in registers: per K step it reads 16 floats
(four 128-bit shared loads) and does 64 FMAs, so shared-memory traffic is no longer the limit,
and every global element is fetched by only N/128 blocks instead of N threads. The next slice
is loaded into registers while the current one is multiplied, hiding global latency. It is
plain fp32 FMA (no TF32, no tensor cores), like cuBLAS's SGEMM that eager PyTorch calls; being
far simpler (no double-buffered shared memory, no swizzling), it measured 3.4 ms against eager's
2.7 ms on an H100 (0.8x, about 40 TFLOP/s), and 7x faster than naive.py.
"""
import torch
import torch.nn as nn

import kernels

SRC = r'''
#define BM 128
#define BN 128
#define BK 8

// p[0..3] of one row as a float4; elements past `cols` (or a row past the end) read as 0.
__device__ __forceinline__ float4 load4(const float* p, bool row_ok, long col, long cols, bool vec) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (!row_ok) return v;
    if (vec && col + 3 < cols) return *reinterpret_cast<const float4*>(p);
    if (col < cols) v.x = p[0];
    if (col + 1 < cols) v.y = p[1];
    if (col + 2 < cols) v.z = p[2];
    if (col + 3 < cols) v.w = p[3];
    return v;
}

// vec: K % 4 == 0, N % 4 == 0 and 16-byte aligned A, B (float4 loads).
__global__ void __launch_bounds__(256, 2) sgemm(const float* __restrict__ A, const float* __restrict__ B,
                                             float* __restrict__ C, long M, long N, long K, bool vec) {
    __shared__ __align__(16) float As[BK][BM + 4];   // A slice transposed: As[k][m]; +4 avoids bank conflicts
    __shared__ __align__(16) float Bs[BK][BN];
    int t = threadIdx.x, tx = t % 16, ty = t / 16;   // thread owns rows ty*4+{0..3}, 64+ty*4+{0..3}
    long bm = (long)blockIdx.y * BM, bn = (long)blockIdx.x * BN;
    int ar = t / 2, ac = (t % 2) * 4;                // A slice: 128 rows x 8 cols, 4 per thread
    int br = t / 32, bc = (t % 32) * 4;              // B slice: 8 rows x 128 cols, 4 per thread
    float acc[8][8] = {};
    float4 a = load4(A + (bm + ar) * K + ac, bm + ar < M, ac, K, vec);
    float4 b = load4(B + (long)br * N + bn + bc, br < K, bn + bc, N, vec);
    for (long k0 = 0; k0 < K; k0 += BK) {
        As[ac + 0][ar] = a.x; As[ac + 1][ar] = a.y; As[ac + 2][ar] = a.z; As[ac + 3][ar] = a.w;
        *reinterpret_cast<float4*>(&Bs[br][bc]) = b;
        __syncthreads();
        long kn = k0 + BK;                           // prefetch the next slice into registers
        if (kn < K) {
            a = load4(A + (bm + ar) * K + kn + ac, bm + ar < M, kn + ac, K, vec);
            b = load4(B + (kn + br) * N + bn + bc, kn + br < K, bn + bc, N, vec);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
            float4 a1 = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
            float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
            float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
            float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        __syncthreads();                             // before the slice is overwritten
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        long r = bm + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            long c = bn + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
    }
}

extern "C" void matmul(const float* A, const float* B, float* C, long M, long N, long K,
                       cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    bool vec = K % 4 == 0 && N % 4 == 0 && (((size_t)A | (size_t)B) & 15) == 0;
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));  // M < 8.4M rows
    sgemm<<<grid, 256, 0, stream>>>(A, B, C, M, N, K, vec);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty(M, N, device=A.device, dtype=A.dtype)
        lib.matmul(A, B, C, M, N, K)
        return C
