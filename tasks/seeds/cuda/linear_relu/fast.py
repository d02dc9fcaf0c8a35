"""y = relu(x @ W^T + b): tiled SGEMM (128x128 tile, 8x8 per thread) with a fused bias+ReLU epilogue.

Analysis: 2 * 2048 * 8192 * 4096 = 137 GFLOP on 192 MiB of inputs: FMA-bound once data is
reused. Both x (batch, in) and W (out, in) are contiguous along K, so each 256-thread block
loads a 128x8 slice of each with 128-bit loads and stores both transposed into shared memory
(padded against bank conflicts); each thread then does 64 FMAs per 16 shared-memory floats,
holding an 8x8 block of y in registers, while the next slice is prefetched into registers.
Bias and ReLU are applied to the registers before the single store, so y is written once;
eager PyTorch runs cuBLAS SGEMM (bias in its epilogue) and then a separate ReLU pass over y
(64 MiB more traffic, small next to the GEMM). Plain fp32 FMA throughout; this simple kernel
measured 3.4 ms against eager's 2.7 ms on an H100 (0.8x), 80x faster than naive.py.
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

// y[m, n] = relu(b[n] + sum_k x[m, k] * W[n, k]). vec: K % 4 == 0 and 16-byte aligned x, W.
__global__ void __launch_bounds__(256, 2) linear_relu_k(const float* __restrict__ x, const float* __restrict__ W,
        const float* __restrict__ bias, float* __restrict__ y, long M, long N, long K, bool vec) {
    __shared__ __align__(16) float Xs[BK][BM + 4];   // transposed slices: Xs[k][m], Ws[k][n]
    __shared__ __align__(16) float Ws[BK][BN + 4];
    int t = threadIdx.x, tx = t % 16, ty = t / 16;   // thread owns rows ty*4+{0..3}, 64+ty*4+{0..3}
    long bm = (long)blockIdx.y * BM, bn = (long)blockIdx.x * BN;
    int lr = t / 2, lc = (t % 2) * 4;                // each slice: 128 rows x 8 k, 4 per thread
    float acc[8][8] = {};
    const float* xp = x + (bm + lr) * K + lc;        // this thread's loads: xp[k0], wp[k0]
    const float* wp = W + (bn + lr) * K + lc;
    bool xok = bm + lr < M, wok = bn + lr < N;
    float4 a = load4(xp, xok, lc, K, vec);
    float4 w = load4(wp, wok, lc, K, vec);
    for (long k0 = 0; k0 < K; k0 += BK) {
        Xs[lc + 0][lr] = a.x; Xs[lc + 1][lr] = a.y; Xs[lc + 2][lr] = a.z; Xs[lc + 3][lr] = a.w;
        Ws[lc + 0][lr] = w.x; Ws[lc + 1][lr] = w.y; Ws[lc + 2][lr] = w.z; Ws[lc + 3][lr] = w.w;
        __syncthreads();
        long kn = k0 + BK;                           // prefetch the next slices into registers
        if (kn < K) {
            a = load4(xp + kn, xok, kn + lc, K, vec);
            w = load4(wp + kn, wok, kn + lc, K, vec);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float4 a0 = *reinterpret_cast<const float4*>(&Xs[k][ty * 4]);
            float4 a1 = *reinterpret_cast<const float4*>(&Xs[k][64 + ty * 4]);
            float4 b0 = *reinterpret_cast<const float4*>(&Ws[k][tx * 4]);
            float4 b1 = *reinterpret_cast<const float4*>(&Ws[k][64 + tx * 4]);
            float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        __syncthreads();                             // before the slices are overwritten
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {                    // epilogue: + bias, ReLU, one store
        long c = bn + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
        float bj = c < N ? bias[c] : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            long r = bm + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
            if (r < M && c < N) y[r * N + c] = fmaxf(acc[i][j] + bj, 0.0f);
        }
    }
}

extern "C" void linear_relu(const float* x, const float* W, const float* b, float* y,
                            long M, long N, long K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    bool vec = K % 4 == 0 && (((size_t)x | (size_t)W) & 15) == 0;
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));  // M < 8.4M rows
    linear_relu_k<<<grid, 256, 0, stream>>>(x, W, b, y, M, N, K, vec);
}
'''
lib = kernels.load_cuda(SRC)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        W, b = self.linear.weight.contiguous(), self.linear.bias.contiguous()
        M, K = x.shape
        N = W.shape[0]
        y = torch.empty(M, N, device=x.device, dtype=x.dtype)
        lib.linear_relu(x, W, b, y, M, N, K)
        return y
