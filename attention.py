"""Decode attention for the sampler (sampler.py): one query per row against a static KV
cache, split over the keys (flash-decoding) in Triton kernels of our own. No mask tensor: row b
attends to cache columns start[b]..col, read as numbers inside the kernel, so one captured CUDA
graph serves every step of a (batch, n_keys) bucket.

    o = attention.split_kv_attention(q, K, V, start, col, n_keys, scale)   # (B, H, hd)
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
# value they load, and a second kernel merges the chunks' partial softmaxes. No mask tensor:
# row b attends to cache columns start[b]..col, read as numbers inside the kernel, so one
# captured graph serves every step of a (batch, n_keys) bucket.
SPLIT_BLOCK = 64   # keys per inner iteration

if triton is not None:
    @triton.jit
    def _split_kv_part(Q, K, V, Start, Col, Acc, Mx, Sm, chunk, scale,
                       sq_b, sq_h, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n,
                       HKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, HD: tl.constexpr,
                       HDP: tl.constexpr, BLOCK: tl.constexpr):
        pair, part = tl.program_id(0), tl.program_id(1)          # (row, kv head), chunk of keys
        b, h = pair // HKV, pair % HKV
        start, col = tl.load(Start + b), tl.load(Col)
        b = b.to(tl.int64)  # a 256-row cache of 32k columns is past 2**31 elements
        lo = part * chunk
        hi = tl.minimum(lo + chunk, col + 1)
        lo = tl.maximum(lo, start // BLOCK * BLOCK)               # earlier blocks hold only left padding
        g, d, n = tl.arange(0, GP), tl.arange(0, HDP), tl.arange(0, BLOCK)   # HDP: HD padded to a power of two
        q = tl.load(Q + b * sq_b + (h * G + g)[:, None] * sq_h + d[None, :], mask=(g < G)[:, None] & (d < HD)[None, :],
                    other=0.0)
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
        at = (pair * tl.num_programs(1) + part) * GP + g
        tl.store(Mx + at, m)
        tl.store(Sm + at, s)
        tl.store(Acc + at[:, None] * HDP + d[None, :], acc)

    @triton.jit
    def _split_kv_merge(Acc, Mx, Sm, O, splits, so_b, so_h,
                        HKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, HD: tl.constexpr,
                        HDP: tl.constexpr):
        pair = tl.program_id(0)
        b, h = pair // HKV, pair % HKV
        g, d = tl.arange(0, GP), tl.arange(0, HDP)
        m = tl.full([GP], float("-inf"), tl.float32)
        s = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, HDP], tl.float32)
        for part in range(splits):
            at = (pair * splits + part) * GP + g
            mp, sp = tl.load(Mx + at), tl.load(Sm + at)
            m_new = tl.maximum(m, mp)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a chunk with no key: weight 0
            a, c = tl.exp(m - m_use), tl.exp(mp - m_use)
            s = s * a + sp * c
            acc = acc * a[:, None] + tl.load(Acc + at[:, None] * HDP + d[None, :]) * c[:, None]
            m = m_new
        tl.store(O + b * so_b + (h * G + g)[:, None] * so_h + d[None, :], (acc / s[:, None]).to(O.dtype.element_ty),
                 mask=(g < G)[:, None] & (d < HD)[None, :])


@functools.lru_cache(maxsize=None)
def sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


def split_kv_fits(heads, kv_heads, head_dim, dtype):
    """True where split_kv_attention applies: a bf16 or fp16 cache (fp32 products would be
    TF32 in tl.dot), heads of 16 to 256 dimensions, at most 16 query heads per kv head."""
    return triton is not None and dtype in (torch.bfloat16, torch.float16) and 16 <= head_dim <= 256 and \
        heads % kv_heads == 0 and heads // kv_heads <= 16


def split_kv_attention(q, K, V, start, col, n_keys, scale, programs=None):
    """One query per row against the cache. q: (B, H, hd); K, V: (B, Hkv, L, hd) caches; start:
    (B,) each row's first real column; col: (1,) the column this step wrote, the last one
    attended; n_keys: a bound on col + 1 (fixed per captured graph); programs: how many to
    aim for (default 4 per SM). -> (B, H, hd) in q's dtype."""
    B, H, hd = q.shape
    Hkv = K.shape[1]
    G = H // Hkv
    GP = max(16, 1 << (G - 1).bit_length())  # tl.dot wants at least 16 rows
    HDP = 1 << (hd - 1).bit_length()
    if q.stride(-1) != 1:
        q = q.contiguous()
    pairs = B * Hkv
    if programs is None:
        programs = 4 * sm_count(q.device)
    blocks = -(-n_keys // SPLIT_BLOCK)
    chunk = -(-blocks // max(1, min(blocks, -(-programs // pairs)))) * SPLIT_BLOCK
    splits = -(-n_keys // chunk)
    acc = torch.empty(pairs * splits * GP, HDP, dtype=torch.float32, device=q.device)
    mx = torch.empty(pairs * splits * GP, dtype=torch.float32, device=q.device)
    sm = torch.empty_like(mx)
    out = torch.empty(B, H, hd, dtype=q.dtype, device=q.device)
    _split_kv_part[(pairs, splits)](q, K, V, start, col, acc, mx, sm, chunk, scale, q.stride(0), q.stride(1),
                                    K.stride(0), K.stride(1), K.stride(2), V.stride(0), V.stride(1), V.stride(2),
                                    HKV=Hkv, G=G, GP=GP, HD=hd, HDP=HDP, BLOCK=SPLIT_BLOCK)
    _split_kv_merge[(pairs,)](acc, mx, sm, out, splits, out.stride(0), out.stride(1),
                              HKV=Hkv, G=G, GP=GP, HD=hd, HDP=HDP)
    return out
