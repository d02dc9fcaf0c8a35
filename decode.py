"""Triton kernels of the sampler's decode step (sampler.py). Attention: one query per row
against a static KV cache, split over the keys (flash-decoding). No mask tensor: row b attends
to cache columns start[b]..col, read as numbers inside the kernel, so one captured CUDA graph
serves every step of a (batch, n_keys) bucket. The MLP's down product of a small model at up
to 32 rows, with silu(gate) * up computed as it is loaded.

    o = decode.split_kv_attention(q, K, V, start, col, n_keys, scale)   # (B, H, hd)
    p = decode.mlp_down(gate, up, w_down)   # (splits, B, D) fp32 partial sums of the product
"""
import functools

import torch

try:  # without Triton, SDPA does this work (sampler.py)
    import triton
    import triton.language as tl
except ImportError:
    triton = None

# Decode attention split over the keys (flash-decoding). SDPA gives each (row, kv head) pair of
# a decode step one thread block and pads that kv head's G query heads to a 64-row tile: on
# the H100 at batch 32 a 1.5B model's 64 blocks leave half of the 132 SMs idle, and the cache
# is read at about a fifth of the memory bandwidth. Here each pair's keys are cut into chunks,
# one program each (about 4 programs per SM in all), the G query heads share every key and
# value they load, and a second kernel merges the chunks' partial softmaxes. Given this step's
# unrotated q, k, v (rope=), the chunk kernel also applies rotary and writes the cache column:
# at batch 32 a step's two rotary and two index_copy kernels a layer were a tenth of its time.
SPLIT_BLOCK = 64   # keys per inner iteration
PROGRAMS_PER_SM = 4   # split_kv_attention aims for this many programs per SM
FEW_PAIRS_PROGRAMS_PER_SM = 2   # ... and this many where (row, kv head) pairs are fewer than SMs: on the
                                # H100 2% faster at batch 32 of a 1.5B model (64 pairs), 2% slower at 256
MERGE_PARTS = 16   # chunks the merge reads at once
MERGE_DIMS = 32    # head dimensions a merge program owns

if triton is not None:
    @triton.jit
    def _rotary(X, cos, sin, d, rows_ok, HD: tl.constexpr):
        """x * cos + rotate_half(x) * sin in fp32 for rows of HD values at X (+ row offsets
        folded into X's pointer block), rounded to X's dtype, as a decoder layer's rotary."""
        half = HD // 2
        partner = tl.where(d < half, d + half, d - half)
        sign = tl.where(d < half, -1.0, 1.0)
        x = tl.load(X + d, mask=rows_ok & (d < HD), other=0.0).to(tl.float32)
        y = tl.load(X + partner, mask=rows_ok & (d < HD), other=0.0).to(tl.float32)
        return x * cos + sign * y * sin

    @triton.jit
    def _split_kv_part(Q, K, V, Start, Col, Acc, Mx, Sm, chunk, scale,
                       sq_b, sq_h, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n,
                       Kn, Vn, Cos, Sin, skn_b, skn_h, svn_b, svn_h, sc_b,
                       HKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, HD: tl.constexpr,
                       HDP: tl.constexpr, BLOCK: tl.constexpr, ROPE: tl.constexpr):
        pair, part = tl.program_id(0), tl.program_id(1)          # (row, kv head), chunk of keys
        b, h = pair // HKV, pair % HKV
        start, col = tl.load(Start + b), tl.load(Col)
        b = b.to(tl.int64)  # a 256-row cache of 32k columns is past 2**31 elements
        lo = part * chunk
        hi = tl.minimum(lo + chunk, col + 1)
        if ROPE:  # column col is added after the loop
            hi = tl.minimum(hi, col)
        lo = tl.maximum(lo, start // BLOCK * BLOCK)               # earlier blocks hold only left padding
        g, d, n = tl.arange(0, GP), tl.arange(0, HDP), tl.arange(0, BLOCK)   # HDP: HD padded to a power of two
        q_at = Q + b * sq_b + (h * G + g)[:, None] * sq_h
        q_ok = (g < G)[:, None] & (d < HD)[None, :]
        if ROPE:  # q, and this step's k and v, come unrotated from the projections
            cos = tl.load(Cos + b * sc_b + d, mask=d < HD, other=0.0).to(tl.float32)
            sin = tl.load(Sin + b * sc_b + d, mask=d < HD, other=0.0).to(tl.float32)
            q = _rotary(q_at, cos[None, :], sin[None, :], d[None, :], (g < G)[:, None], HD).to(Q.dtype.element_ty)
            k_new = _rotary(Kn + b * skn_b + h * skn_h, cos, sin, d, d < HD, HD).to(K.dtype.element_ty)
            v_new = tl.load(Vn + b * svn_b + h * svn_h + d, mask=d < HD, other=0.0).to(V.dtype.element_ty)
            # the chunk holding column col writes it and adds it after its loop; no program reads
            # it from the cache, so no ordering between programs is needed
            mine = (d < HD) & (d * 0 + part == col // chunk)   # (a vector: the interpreter wants one)
            tl.store(K + b * sk_b + h * sk_h + col * sk_n + d, k_new, mask=mine)
            tl.store(V + b * sv_b + h * sv_h + col * sv_n + d, v_new, mask=mine)
        else:
            q = tl.load(q_at + d[None, :], mask=q_ok, other=0.0)
        m = tl.full([GP], float("-inf"), tl.float32)              # running max of the scores
        s = tl.zeros([GP], tl.float32)                            # running sum of exp(score - m)
        acc = tl.zeros([GP, HDP], tl.float32)                     # running sum of exp(score - m) * v
        for n0 in range(lo, hi, BLOCK):
            keys = n0 + n
            ok = (keys >= start) & (keys < hi)
            kv_ok = ok[:, None] & (d < HD)[None, :]
            k = tl.load(K + b * sk_b + h * sk_h + keys[:, None] * sk_n + d[None, :], mask=kv_ok, other=0.0)
            v = tl.load(V + b * sv_b + h * sv_h + keys[:, None] * sv_n + d[None, :], mask=kv_ok, other=0.0)
            x = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * scale, float("-inf"))   # (GP, BLOCK)
            m_new = tl.maximum(m, tl.max(x, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: nothing to rescale
            p = tl.exp(x - m_use[:, None])
            alpha = tl.exp(m - m_use)
            s = s * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        if ROPE:  # column col, in the chunk that holds it: the same update for one key
            x = tl.sum(q.to(tl.float32) * k_new.to(tl.float32)[None, :], 1) * scale   # (GP,)
            x = tl.where(g * 0 + part == col // chunk, x, float("-inf"))
            m_new = tl.maximum(m, x)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(x - m_use)
            alpha = tl.exp(m - m_use)
            s = s * alpha + p
            acc = acc * alpha[:, None] + p[:, None] * v_new.to(tl.float32)[None, :]
            m = m_new
        at = (pair * tl.num_programs(1) + part) * GP + g
        tl.store(Mx + at, m)
        tl.store(Sm + at, s)
        tl.store(Acc + at[:, None] * HDP + d[None, :], acc)

    @triton.jit
    def _split_kv_merge(Acc, Mx, Sm, O, splits, so_b, so_h,
                        HKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, HD: tl.constexpr,
                        HDP: tl.constexpr, PARTS: tl.constexpr, DIMS: tl.constexpr):
        # PARTS chunks at once, not one after another (a chain of dependent loads), and DIMS head
        # dimensions a program: at batch 32 of a 1.5B model 256 programs, not 64
        pair, dims = tl.program_id(0), tl.program_id(1)
        b, h = pair // HKV, pair % HKV
        g, d, p = tl.arange(0, GP), dims * DIMS + tl.arange(0, DIMS), tl.arange(0, PARTS)
        m = tl.full([GP], float("-inf"), tl.float32)
        s = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, DIMS], tl.float32)
        for p0 in range(0, splits, PARTS):
            ok = (p0 + p < splits)[:, None]
            at = (pair * splits + p0 + p)[:, None] * GP + g[None, :]          # (PARTS, GP)
            mp = tl.load(Mx + at, mask=ok, other=float("-inf"))
            sp = tl.load(Sm + at, mask=ok, other=0.0)
            m_new = tl.maximum(m, tl.max(mp, 0))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a chunk with no key: weight 0
            a, c = tl.exp(m - m_use), tl.exp(mp - m_use[None, :])
            s = s * a + tl.sum(sp * c, 0)
            x = tl.load(Acc + at[:, :, None] * HDP + d[None, None, :], mask=ok[:, :, None], other=0.0)
            acc = acc * a[:, None] + tl.sum(x * c[:, :, None], 0)
            m = m_new
        tl.store(O + b * so_b + (h * G + g)[:, None] * so_h + d[None, :], (acc / s[:, None]).to(O.dtype.element_ty),
                 mask=(g < G)[:, None] & (d < HD)[None, :])


    @triton.jit
    def _mlp_down_part(Gt, Ut, W, P, M, N, I, k_per, s_g, s_u, s_w, s_ps, s_pm,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # (rows, outputs, a slice of the MLP's width): silu(gate) * up on load, the down
        # product's partial sum over the slice to P[slice] in fp32. The weight tile is the
        # product's first operand and the activations, computed in registers, its second: the
        # other way round the kernel took more than twice as long on the H100
        pm, pn, ps = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        m, n, kk = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros([BN, BM], tl.float32)
        lo = ps * k_per
        for k0 in range(lo, lo + k_per, BK):
            k = k0 + kk
            ok = (k < I)[:, None] & (m < M)[None, :]
            g = tl.load(Gt + m[None, :] * s_g + k[:, None], mask=ok, other=0.0).to(tl.float32)
            u = tl.load(Ut + m[None, :] * s_u + k[:, None], mask=ok, other=0.0).to(tl.float32)
            x = (g * tl.sigmoid(g) * u).to(W.dtype.element_ty)                          # (BK, BM)
            w = tl.load(W + n[:, None] * s_w + k[None, :], mask=(n < N)[:, None] & (k < I)[None, :], other=0.0)
            acc += tl.dot(w, x)                                                          # (BN, BM)
        tl.store(P + ps * s_ps + m[None, :] * s_pm + n[:, None], acc, mask=(m < M)[None, :] & (n < N)[:, None])


@functools.lru_cache(maxsize=None)
def sm_count(device):
    """The GPU's SMs, or 8 on a CPU (Triton's interpreter, in the tests)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8


def split_kv_fits(heads, kv_heads, head_dim, dtype):
    """True where split_kv_attention applies: a bf16 or fp16 cache (fp32 products would be
    TF32 in tl.dot), heads of 16 to 256 dimensions, at most 16 query heads per kv head."""
    return triton is not None and dtype in (torch.bfloat16, torch.float16) and 16 <= head_dim <= 256 and \
        heads % kv_heads == 0 and heads // kv_heads <= 16


def split_kv_attention(q, K, V, start, col, n_keys, scale, programs=None, rope=None):
    """One query per row against the cache. q: (B, H, hd); K, V: (B, Hkv, L, hd) caches; start:
    (B,) each row's first real column; col: (1,) the column this step writes, the last one
    attended; n_keys: a bound on col + 1 (fixed per captured graph); programs: how many to
    aim for (default 4 per SM, 2 with fewer (row, kv head) pairs than SMs); rope: None when q
    is rotated and column col already written, else (k, v, cos, sin): this step's k, v (B, Hkv,
    hd) and rotary tables (B, hd) with q and k unrotated; the kernel rotates them and writes
    column col (two rotary and two cache-write kernels a layer fewer). -> (B, H, hd) in q's
    dtype."""
    B, H, hd = q.shape
    Hkv = K.shape[1]
    G = H // Hkv
    GP = max(16, 1 << (G - 1).bit_length())  # tl.dot wants at least 16 rows
    HDP = 1 << (hd - 1).bit_length()
    if q.stride(-1) != 1:
        q = q.contiguous()
    kn, vn, cos, sin = rope if rope is not None else (q, q, q, q)   # unread placeholders
    if rope is not None:
        assert cos.shape == sin.shape == (B, hd) and hd % 2 == 0, "rope: full rotary tables, (B, hd)"
        kn, vn, cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (kn, vn, cos, sin))
        assert cos.stride() == sin.stride()
    pairs = B * Hkv
    if programs is None:
        sms = sm_count(q.device)
        programs = (PROGRAMS_PER_SM if pairs >= sms else FEW_PAIRS_PROGRAMS_PER_SM) * sms
    blocks = -(-n_keys // SPLIT_BLOCK)
    chunk = -(-blocks // max(1, min(blocks, -(-programs // pairs)))) * SPLIT_BLOCK
    splits = -(-n_keys // chunk)
    acc = torch.empty(pairs * splits * GP, HDP, dtype=torch.float32, device=q.device)
    mx = torch.empty(pairs * splits * GP, dtype=torch.float32, device=q.device)
    sm = torch.empty_like(mx)
    out = torch.empty(B, H, hd, dtype=q.dtype, device=q.device)
    _split_kv_part[(pairs, splits)](q, K, V, start, col, acc, mx, sm, chunk, scale, q.stride(0), q.stride(1),
                                    K.stride(0), K.stride(1), K.stride(2), V.stride(0), V.stride(1), V.stride(2),
                                    kn, vn, cos, sin, kn.stride(0), kn.stride(1), vn.stride(0), vn.stride(1),
                                    cos.stride(0), HKV=Hkv, G=G, GP=GP, HD=hd, HDP=HDP, BLOCK=SPLIT_BLOCK,
                                    ROPE=rope is not None)
    parts, dims = min(MERGE_PARTS, 1 << (splits - 1).bit_length()), min(MERGE_DIMS, HDP)
    _split_kv_merge[(pairs, HDP // dims)](acc, mx, sm, out, splits, out.stride(0), out.stride(1),
                                          HKV=Hkv, G=G, GP=GP, HD=hd, HDP=HDP, PARTS=parts, DIMS=dims)
    return out


# The MLP's down projection of a decode step, silu(gate) * up computed as it is loaded and the
# product split over the MLP's width (split-K): at 32 rows of a 1.5B model the separate
# silu-mul kernel, cuBLAS's split-K reduction and the residual add were each a few microseconds
# of latency a layer. The partial sums go back unreduced; the next layer's norm adds them to
# the residual (sampler.proj), so no kernel of their own.
DOWN_MAX_ROWS = 32   # above this cuBLAS's GEMM and a separate silu-mul did better (H100, 64 rows)
DOWN_MAX_WEIGHT = 32 << 20   # weight elements; above, cuBLAS's GEMM reads them faster than the
                             # few kernels a layer saved (H100: 1.5B's 14M a win, 7B's 68M a loss)
DOWN_BLOCK = (64, 128, 64)   # rows, outputs, width a program's tile holds at most (best on the H100 at 32 rows)
DOWN_SPLITS = None   # width slices; None: enough programs to cover the SMs once


def mlp_down_fits(rows, w):
    """True where mlp_down is used for `rows` rows and the down weight w."""
    return triton is not None and rows <= DOWN_MAX_ROWS and w.numel() <= DOWN_MAX_WEIGHT and \
        w.dtype in (torch.bfloat16, torch.float16)


def mlp_down(g, u, w, splits=None):
    """silu(g) * u @ w.T as split-K partial sums. g, u: (..., I) gate and up outputs (views of
    one packed output are fine); w: (N, I) the down weight -> (splits, rows, N) fp32, whose sum
    over the first dimension is the product (rounded to w's dtype, what F.linear returns)."""
    I = g.shape[-1]
    g, u = g.reshape(-1, I), u.reshape(-1, I)
    if g.stride(-1) != 1 or u.stride(-1) != 1:
        g, u = g.contiguous(), u.contiguous()
    M, N = g.shape[0], w.shape[0]
    BM = min(DOWN_BLOCK[0], max(16, 1 << (M - 1).bit_length()))
    BN, BK = DOWN_BLOCK[1:]
    tiles = -(-M // BM) * -(-N // BN)
    if splits is None:
        splits = DOWN_SPLITS or max(1, min(-(-I // BK), -(-sm_count(g.device) // tiles)))
    k_per = -(-I // splits // BK) * BK
    splits = -(-I // k_per)
    p = torch.empty(splits, M, N, dtype=torch.float32, device=g.device)
    _mlp_down_part[(-(-M // BM), -(-N // BN), splits)](g, u, w, p, M, N, I, k_per, g.stride(0), u.stride(0),
                                                        w.stride(0), p.stride(0), p.stride(1),
                                                        BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=4)
    return p
