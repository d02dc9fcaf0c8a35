"""Fast sampling: a static KV cache and a decode loop of our own for Llama-family decoders
(Llama, Qwen2, Qwen3, Mistral and their coder models), replayed as CUDA graphs on a GPU.
Works on token ids only; policy.generate turns chat messages into them and back.

    s = sampler.Sampler(model, cfg)      # a bf16 copy when model trains in fp32 on a GPU
    s.refresh()                          # copy the training weights in (after an update)
    rows = s.sample([[ids], ...], max_new=512, temperature=1.0, top_p=0.95, stop=[eos])
    # rows[i] = (tokens, logps, finished): the sampled ids (stop token included when the
    # reply finished) and each one's log-prob under the temperature-scaled distribution

Why our own loop: Hugging Face `generate` spends most of a decode step in Python (logits
processors, cache bookkeeping, a host sync per token) and, with fp32 training weights,
casts every weight to bf16 on every step. Here one decode step is a fixed sequence of
kernels over fixed buffers (the cache, the current tokens, the column counter), so it is
captured once per (batch size, attention length) bucket and replayed; sampling (temperature,
top-p) happens inside the graph. Rows share one cache column per step (prompts are left
padded), so a step writes one column for every row. Finished rows stop costing compute:
when at most half of a bucket is still live, the live rows move to the front of the cache
and decoding continues at the next smaller bucket. Attention reads only the cache columns
written so far, rounded up to a multiple of `KEY_BUCKET`; on a GPU a decode step attends
through split_kv_attention, a Triton kernel of our own (SDPA with --decode_attention=sdpa),
and under --sampler=compile a small model's MLP down product at up to 32 rows through mlp_down.
Other architectures (sliding-window attention, ...) fall back to `generate` (policy.py).
"""
import copy
import math
import warnings

import torch
import torch.nn.functional as F

from decode import mlp_down, mlp_down_fits, split_kv_attention, split_kv_fits

KEY_BUCKET = 512   # attention length granularity: cache columns read per step, rounded up
CHECK_EVERY = 8    # decode steps between host checks of which rows have finished


def decoder_parts(model):
    """-> (base model, decoder core, LM head) of a plain or peft-wrapped causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base, base.get_decoder(), base.get_output_embeddings()


def supported(model):
    """True for the decoders our loop reproduces exactly: pre-norm layers with q/k/v/o
    projections (optional biases, optional per-head q/k norms), rotary positions, full
    attention in every layer, and an MLP module called as is."""
    try:
        base, core, head = decoder_parts(model)
        if base.config.model_type not in ("llama", "qwen2", "qwen3", "mistral"):
            return False
        cfg = base.config
        layer = core.layers[0]
        a = layer.self_attn
        needed = [core.embed_tokens, core.norm, core.rotary_emb, head, layer.input_layernorm,
                  layer.post_attention_layernorm, layer.mlp, a.q_proj, a.k_proj, a.v_proj, a.o_proj]
    except (AttributeError, IndexError, TypeError):
        return False
    windowed = getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)
    layer_types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    return all(m is not None for m in needed) and not windowed and layer_types == {"full_attention"} \
        and not getattr(cfg, "is_encoder_decoder", False)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms(x, w, eps):
    """RMSNorm as Llama/Qwen compute it: in fp32, the weight applied in the input's dtype."""
    y = x.float()
    return w * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def proj(h, part, ln_w, eps, ws, bs, sizes, hd):
    """A layer's attention inputs before rotary: norm and projections. h: (B, S, D); part: None
    or the previous layer's MLP output as mlp_down's partial sums, added to h first; ws, bs: the
    q, k, v weights and biases, or one joined weight (join_weights()) and bias; sizes: q, k, v's widths
    -> h, q (B, H, S, hd), k, v (B, Hkv, S, hd). Weights come as tensors, not modules, so one
    torch.compile of it serves every layer (--sampler=compile)."""
    B, S, _ = h.shape
    if part is not None:  # slice by slice (unrolled: part's length is fixed): this norm's kernel adds them
        h = h + sum(part.unbind(0)).to(h.dtype).view_as(h)
    x = rms(h, ln_w, eps)
    y = [F.linear(x, w, b) for w, b in zip(ws, bs)]
    q, k, v = (y if len(y) == 3 else y[0].split(sizes, -1))
    return (h,) + tuple(t.reshape(B, S, -1, hd).transpose(1, 2) for t in (q, k, v))


def qkv(h, ln_w, eps, ws, bs, sizes, cos, sin, hd):
    """proj() and rotary. cos, sin: (B, 1, S, hd)."""
    _, q, k, v = proj(h, None, ln_w, eps, ws, bs, sizes, hd)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def gate_up(h, o, wo, bo, ln_w, eps, wgu):
    """A layer's output projection and residual, norm, and the MLP's gate and up products.
    h: (B, S, D); o: (B, S, H * hd); wgu: the gate and up weights, or one joined weight
    (join_weights()) -> h, gate, up."""
    h = h + F.linear(o, wo, bo)
    x = rms(h, ln_w, eps)
    g, u = [F.linear(x, w) for w in wgu] if len(wgu) == 2 else F.linear(x, wgu[0]).chunk(2, -1)
    return h, g, u


def out_mlp(h, o, wo, bo, ln_w, eps, wgu, wd):
    """A layer's rest: gate_up() and the SiLU-gated MLP's down product and residual -> (B, S, D)."""
    h, g, u = gate_up(h, o, wo, bo, ln_w, eps, wgu)
    return h + F.linear(F.silu(g) * u, wd)


def join_weights(core):
    """Make each layer's q, k, v weights (and biases) views of one tensor, and its gate and up
    weights views of another: one GEMM for each group, not five, in a decode step
    (--sampler=compile; at 32 rows the gate and up products each filled 70 of an H100's 132
    SMs). Only for a model nothing saves (Sampler's own copy): shared storage does not survive
    a checkpoint. Sets layer.self_attn.joined (weight, bias) and layer.mlp.joined."""
    def join(tensors):  # -> one tensor, each of `tensors` now a view of it
        whole, at = torch.cat([t.detach() for t in tensors]), 0
        for t in tensors:
            t.data = whole[at:at + len(t)]
            at += len(t)
        return whole
    for layer in core.layers:
        a, m = layer.self_attn, layer.mlp
        mods = (a.q_proj, a.k_proj, a.v_proj)
        biases = [x.bias for x in mods if x.bias is not None]
        if len(biases) in (0, 3):
            a.joined = join([x.weight for x in mods]), join(biases) if biases else None
        m.joined = join([m.gate_proj.weight, m.up_proj.weight])


def projections(a):
    """An attention module's q, k, v weights and biases as qkv() takes them: joined or not."""
    mods = (a.q_proj, a.k_proj, a.v_proj)
    sizes = [m.weight.shape[0] for m in mods]
    if hasattr(a, "joined"):
        return [a.joined[0]], [a.joined[1]], sizes
    return [m.weight for m in mods], [m.bias for m in mods], sizes


def fusable(core):
    """True where qkv/out_mlp compute exactly what the layers' modules do: Llama/Qwen2
    layers (no per-head q/k norms), SiLU-gated MLPs without biases, RMSNorm weights."""
    cfg = getattr(core, "config", None)
    layer = core.layers[0]
    mlp, a = layer.mlp, layer.self_attn
    return getattr(cfg, "hidden_act", None) == "silu" and getattr(a, "q_norm", None) is None and \
        all(getattr(getattr(mlp, n, None), "bias", 0) is None for n in ("gate_proj", "up_proj", "down_proj")) and \
        all(hasattr(n, "weight") and hasattr(n, "variance_epsilon") for n in
            (layer.input_layernorm, layer.post_attention_layernorm))


FUSED = None  # (qkv, out_mlp, proj, gate_up, probs, nucleus_pick) compiled once per process, shared by all


def fused_parts():
    global FUSED
    if FUSED is None:
        FUSED = tuple(torch.compile(f, dynamic=True, fullgraph=True)
                      for f in (qkv, out_mlp, proj, gate_up, probs, nucleus_pick))
    return FUSED


def forward(core, ids, pos, cols, mask, ks, vs, n_keys, fused=None, span=None):
    """The decoder over S new tokens per row, with a cache. ids, pos: (B, S); cols: (S,)
    the cache columns they are written to; mask: (B, 1, S, n_keys) bool, True = attend;
    ks, vs: per layer (B, Hkv, L, hd) cache views; fused: (qkv, out_mlp, proj, gate_up)
    compiled, or None for the layers' own modules; span: for a decode step (S = 1), (start (B,),
    col (1,)) to attend through split_kv_attention instead of SDPA and the mask (then None);
    with fused, that kernel also applies rotary and writes the cache column, and where
    mlp_down_fits, the MLP's down product goes through mlp_down.
    -> final hidden states (B, S, D)."""
    h = core.embed_tokens(ids)
    cos, sin = core.rotary_emb(h, pos)                       # (B, S, hd)
    cos, sin = cos[:, None], sin[:, None]
    B, S, _ = h.shape
    step = fused and S == 1 and span is not None   # a decode step through our kernels
    down = step and mlp_down_fits(B, core.layers[0].mlp.down_proj.weight)
    part = None   # the last layer's MLP output, mlp_down's partial sums not yet added to h
    for layer, K, V in zip(core.layers, ks, vs):
        a = layer.self_attn
        hd = a.head_dim
        rope = None
        if fused:
            n1 = layer.input_layernorm
            if step:  # rotary and the cache write inside the attention kernel
                h, q, k, v = fused[2](h, part, n1.weight, n1.variance_epsilon, *projections(a), hd)
                rope = k[:, :, 0], v[:, :, 0], cos[:, 0, 0], sin[:, 0, 0]
            else:
                q, k, v = fused[0](h, n1.weight, n1.variance_epsilon, *projections(a), cos, sin, hd)
        else:
            x = layer.input_layernorm(h)
            q = a.q_proj(x).view(B, S, -1, hd)
            k = a.k_proj(x).view(B, S, -1, hd)
            v = a.v_proj(x).view(B, S, -1, hd).transpose(1, 2)   # (B, Hkv, S, hd)
            if getattr(a, "q_norm", None) is not None:           # Qwen3: RMSNorm per head
                q, k = a.q_norm(q), a.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if rope is None:
            K.index_copy_(2, cols, k.to(K.dtype))
            V.index_copy_(2, cols, v.to(V.dtype))
        Kk, Vk = K[:, :, :n_keys], V[:, :, :n_keys]
        H, Hkv = q.shape[1], K.shape[1]
        G = H // Hkv
        scale = getattr(a, "scaling", hd ** -0.5)
        if S == 1 and span is not None:
            o = split_kv_attention(q[:, :, 0], K, V, *span, n_keys, scale, rope=rope)
        elif S == 1:  # decode: the G query heads of a kv head become G query rows (no K/V copies)
            o = F.scaled_dot_product_attention(q.reshape(B, Hkv, G, hd), Kk, Vk, attn_mask=mask, scale=scale)
        else:       # prefill, once per batch: repeat K/V per query head
            o = F.scaled_dot_product_attention(q, Kk.repeat_interleave(G, 1), Vk.repeat_interleave(G, 1),
                                               attn_mask=mask, scale=scale)
        o = o.reshape(B, H, S, hd).transpose(1, 2).reshape(B, S, H * hd).to(h.dtype)
        if fused:
            n2, m = layer.post_attention_layernorm, layer.mlp
            wgu = [m.joined] if hasattr(m, "joined") else [m.gate_proj.weight, m.up_proj.weight]
            args = (h, o, a.o_proj.weight, a.o_proj.bias, n2.weight, n2.variance_epsilon, wgu)
            if down:
                h, g, u = fused[3](*args)
                part = mlp_down(g, u, m.down_proj.weight)
            else:
                h = fused[1](*args, m.down_proj.weight)
        else:
            h = h + a.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
    if part is not None:
        h = h + part.sum(0).to(h.dtype).view_as(h)
    return core.norm(h)


def pick(logits, temperature, top_p, nucleus="sort", fused=None):
    """Sample one token per row. logits: (B, V) fp32 -> (tokens (B,), log-probs (B,)). The
    log-prob is under the temperature-scaled full distribution, which is what the update
    scores (top-p only narrows what may be drawn). Drawing by argmax(p / Exp(1)) is exact
    and needs no host sync, so it can live inside a CUDA graph. nucleus: how top-p is drawn,
    "sort" (the vocabulary sorted every step) or "reject" (nucleus_draw). fused: (probs,
    nucleus_pick) compiled (--sampler=compile), or None. The random numbers are drawn
    eagerly, outside compiled code: an eager draw inside a CUDA graph advances the generator
    at every replay, so each step and row draws anew."""
    if temperature <= 0:
        tok = logits.argmax(-1)
        return tok, torch.log_softmax(logits, -1).gather(-1, tok[:, None])[:, 0]
    logp, p = (fused[0] if fused else probs)(logits, temperature)
    if top_p < 1.0 and nucleus == "reject" and top_p >= 0.5:
        tok = nucleus_draw(p, top_p, fused[1] if fused else nucleus_pick)
    else:
        if top_p < 1.0:
            sp, idx = p.sort(-1, descending=True)
            cut = (sp.cumsum(-1) - sp) > top_p                # the mass before it already exceeds top_p
            p = p.scatter(-1, idx, sp.masked_fill(cut, 0.0))
        tok = (p / torch.empty_like(p).exponential_()).argmax(-1)
    return tok, logp.gather(-1, tok[:, None])[:, 0]


def probs(logits, temperature: float):
    """logits (B, V) -> (log-probs, probs) under logits / temperature."""
    logp = torch.log_softmax(logits / temperature, -1)
    return logp, logp.exp()


def nucleus_draw(p, top_p, keep=None, miss=1e-6):
    """Top-p sampling without a sort: R tokens drawn from the whole distribution p (B, V),
    the first one inside the nucleus kept (those whose more probable tokens hold at most
    top_p of the mass, which is the sort's rule up to ties). Rejection sampling: the kept
    token follows p restricted to the nucleus exactly. A draw misses the nucleus with
    probability at most 1 - top_p, so R = log(miss) / log(1 - top_p) draws all miss at most
    `miss` of the time; then the most probable token is taken. Costs one pass over p
    (inverse_cdf) and R reductions over the vocabulary instead of a sort (R = 5 at top_p
    0.95). The draws stay eager (the random numbers must be drawn anew at every replay);
    keep: nucleus_pick, compiled or not. -> (B,)"""
    R = max(1, math.ceil(math.log(miss) / math.log(1.0 - top_p)))
    x = chunked(p)                                                           # (B, n, w)
    tot = x.sum(-1).cumsum(-1)                                               # (B, n) mass up to each chunk's end
    u = torch.rand(p.shape[0], R, device=p.device) * tot[:, -1:]             # (B, R)
    cand = inverse_cdf(x, tot, u).clamp_(max=p.shape[-1] - 1)                # (B, R) drawn from p
    return (keep or nucleus_pick)(p, cand, top_p)


def chunked(p, widest=1024):
    """p (B, V) as (B, n, w) chunks: one chunk where V is at most `widest`; a view where a
    power of two of at least 64 divides V; else zero-padded to a multiple of `widest`."""
    B, V = p.shape
    if V <= widest:
        return p.view(B, 1, V)
    w = min(V & -V, widest)
    if w < 64:
        w = widest
        p = F.pad(p, (0, -V % w))
    return p.view(B, -1, w)


def inverse_cdf(x, tot, u):
    """The indices searchsorted(p.cumsum(-1), u) gives, without a scan over the whole row
    (torch's takes about 0.25 ms a step on an H100, one thread block per row): the chunk
    holding each u from the chunks' running totals, then the place inside that chunk from
    its own cumulative sum. x: (B, n, w) chunked p; tot: (B, n) its running chunk totals;
    u: (B, R) -> (B, R) flat indices into the chunked row."""
    w = x.shape[-1]
    c = torch.searchsorted(tot, u).clamp_(max=x.shape[1] - 1)                # (B, R) the chunk holding u
    before = torch.where(c > 0, tot.gather(-1, (c - 1).clamp(min=0)), 0.0)  # (B, R) mass of earlier chunks
    inner = x.gather(1, c[:, :, None].expand(-1, -1, w)).cumsum(-1)          # (B, R, w)
    j = torch.searchsorted(inner, (u - before)[:, :, None])[:, :, 0].clamp_(max=w - 1)
    return c * w + j


def nucleus_pick(p, cand, top_p: float):
    """Of the R candidates cand (B, R) drawn from p (B, V), the first inside the nucleus, or
    where none is, the most probable token -> (B,)."""
    pc = p.gather(-1, cand)                                                  # (B, R)
    above = torch.stack([torch.where(p > pc[:, r, None], p, 0.0).sum(-1) for r in range(cand.shape[1])], -1)
    inside = above <= top_p                                                  # (B, R)
    first = cand.gather(-1, inside.float().argmax(-1, keepdim=True))[:, 0]   # argmax: the first True
    return torch.where(inside.any(-1), first, p.argmax(-1))


class Decoder:
    """The static cache, the per-step buffers and the captured graphs of one model."""

    def __init__(self, model, max_batch, max_len, graphs, fuse=False, nucleus="sort", attention="auto"):
        self.model, self.nucleus = model, nucleus
        base, self.core, self.head = decoder_parts(model)
        self.fused = fused_parts()[:4] if fuse and fusable(self.core) else None
        self.fused_pick = fused_parts()[4:] if fuse else None  # the draw compiled, for any decoder
        self.dev, self.dtype = self.head.weight.device, self.head.weight.dtype
        a = self.core.layers[0].self_attn
        # decode steps through split_kv_attention: on a GPU, where the kernel fits the shapes
        self.split_kv = attention == "auto" and self.dev.type == "cuda" and split_kv_fits(
            base.config.num_attention_heads, base.config.num_key_value_heads, a.head_dim, self.dtype)
        self.B, self.L = max_batch, max_len
        self.graphs_on = graphs and self.dev.type == "cuda"
        self.ks = self.vs = None
        self.graphs, self.pool = {}, None
        self.stop_set = None
        self.compactions = 0   # how often finished rows were dropped (tests read it)

    def _alloc(self):
        if self.ks is not None:
            return
        a = self.core.layers[0].self_attn
        shape = (self.B, decoder_parts(self.model)[0].config.num_key_value_heads, self.L, a.head_dim)
        n = len(self.core.layers)
        self.ks = [torch.zeros(shape, dtype=self.dtype, device=self.dev) for _ in range(n)]
        self.vs = [torch.zeros(shape, dtype=self.dtype, device=self.dev) for _ in range(n)]
        B, dev = self.B, self.dev
        self.tok = torch.zeros(B, dtype=torch.long, device=dev)      # the last token of every row
        self.start = torch.zeros(B, dtype=torch.long, device=dev)    # first real column of every row
        self.col = torch.zeros(1, dtype=torch.long, device=dev)      # the column this step writes
        self.done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.slot = torch.zeros(1, dtype=torch.long, device=dev)     # the output column this step fills
        self.keys = torch.arange(self.L, device=dev)
        self.out = self.outlp = self.stop = None

    def _forward(self, *args, span=None):
        """forward() through the fused layers where torch.compile works here, else the
        modules, and for a decode step (span given) through split_kv_attention where it
        runs here, else SDPA: a compile that fails (no compiler, no Triton) falls back once,
        with a warning. Its first call of a shape is never inside a capture (run_step runs a
        step before it captures one), and running a step again rewrites the same cache
        columns with the same values."""
        if span is not None and not self.split_kv:   # SDPA needs the mask the kernel reads as numbers
            ids, pos, cols, _, ks, vs, n_keys = args
            keys = self.keys[:n_keys]
            mask = ((keys >= span[0][:, None]) & (keys <= span[1]))[:, None, None]    # (b, 1, 1, n_keys)
            args, span = (ids, pos, cols, mask, ks, vs, n_keys), None
        try:
            return forward(self.core, *args, self.fused, span)
        except torch._dynamo.exc.TorchDynamoException as e:
            if not self.fused:
                raise
            warnings.warn(f"--sampler=compile: torch.compile failed ({type(e).__name__}); "
                          "sampling with the unfused layers")
            self.fused = None
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # a Triton that cannot build or launch the kernel here
            if span is None:
                raise
            warnings.warn(f"split-KV decode attention failed ({type(e).__name__}: {e}); decoding with SDPA")
            self.split_kv = False
        return self._forward(*args, span=span)

    def _pick(self, h, temperature, top_p):
        """pick() on the last hidden states h (B, D), through the compiled draw (probs and
        nucleus_pick) where it compiles here, else eagerly (falling back once, with a warning,
        as _forward does)."""
        logits = self.head(h).float()
        if self.fused_pick is not None:
            try:
                return pick(logits, temperature, top_p, self.nucleus, self.fused_pick)
            except torch._dynamo.exc.TorchDynamoException as e:
                warnings.warn(f"--sampler=compile: torch.compile failed ({type(e).__name__}); drawing eagerly")
                self.fused_pick = None
        return pick(logits, temperature, top_p, self.nucleus)

    def _step(self, b, n_keys, temperature, top_p, stop, out, outlp, s):
        """One decode step for the first b rows; everything it reads and writes is a fixed
        buffer, so the same kernels can be replayed. s: (1,) the output slot."""
        col = self.col
        pos = (col - self.start[:b])[:, None]                                     # (b, 1)
        h = self._forward(self.tok[:b, None], pos, col, None, [k[:b] for k in self.ks], [v[:b] for v in self.vs],
                          n_keys, span=(self.start[:b], col))
        tok, lp = self._pick(h[:, -1], temperature, top_p)
        self.tok[:b].copy_(tok)
        out[:b].index_copy_(1, s, tok[:, None])
        outlp[:b].index_copy_(1, s, lp[:, None])
        self.done[:b] |= (tok[:, None] == stop).any(-1)   # not isin: for many stop ids it syncs, which capture forbids
        col.add_(1)
        s.add_(1)

    def run_step(self, b, n_keys, args):
        key = (b, n_keys) + tuple(args[:2])  # temperature and top_p are constants inside a graph
        if not self.graphs_on:
            return self._step(b, n_keys, *args)
        g = self.graphs.get(key)
        if g is not None:
            return g.replay()
        self._step(b, n_keys, *args)  # the real step doubles as the warm-up capture needs
        g = torch.cuda.CUDAGraph()
        self.pool = self.pool or torch.cuda.graph_pool_handle()
        # capture records, it does not run: the buffers are untouched until replay
        with torch.cuda.graph(g, pool=self.pool):
            self._step(b, n_keys, *args)
        self.graphs[key] = g

    @torch.no_grad()
    def sample(self, prompts, max_new, temperature, top_p, stop):
        """Up to max_batch prompts (lists of ids) -> [(tokens, logps, finished)]."""
        assert 0 < len(prompts) <= self.B
        self._alloc()
        n, W = len(prompts), max(len(p) for p in prompts)
        max_new = min(max_new, self.L - W)
        dev = self.dev
        # graphs read these buffers by address: new ones (longer replies, other stop tokens)
        # mean new graphs
        if self.out is None or self.out.shape[1] < max_new or self.stop_set != set(stop):
            self.out = torch.zeros(self.B, max(max_new, 1), dtype=torch.long, device=dev)
            self.outlp = torch.zeros(self.B, max(max_new, 1), dtype=torch.float32, device=dev)
            self.stop, self.stop_set = torch.tensor(sorted(set(stop)), device=dev), set(stop)
            # and a new pool: a pool whose graphs are gone may still hold blocks (torch.compile's
            # kernels keep some), and capturing into it again trips the allocator's assert
            self.graphs.clear()
            self.pool = None
        stop_t = self.stop
        ids = torch.zeros(n, W, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, W - len(p):] = torch.tensor(p)
        start = torch.tensor([W - len(p) for p in prompts])
        self.start.zero_()[:n].copy_(start)
        self.done.fill_(True)
        self.done[:n] = False
        self._prefill(ids.to(dev), n, W, temperature, top_p, stop_t)
        rows = list(range(n))                # slot -> prompt index
        results = [None] * n
        b, steps = bucket(n, self.B), 1
        self.col.fill_(W)
        while steps < max_new:
            n_keys = min(self.L, -(-(W + steps) // KEY_BUCKET) * KEY_BUCKET)
            self.run_step(b, n_keys, (temperature, top_p, stop_t, self.out, self.outlp, self.slot))
            steps += 1
            if steps % CHECK_EVERY and steps < max_new:
                continue
            done = self.done[:len(rows)].tolist()
            if all(done):
                break
            live = [i for i, d in enumerate(done) if not d]
            if len(live) <= b // 2:
                self._harvest(rows, done, results, steps)
                self._compact(live, steps)
                rows = [rows[i] for i in live]
                b = bucket(len(rows), self.B)
        self._harvest(rows, [True] * len(rows), results, steps)
        return results

    def _prefill(self, ids, n, W, temperature, top_p, stop):
        """Run the prompts, a few rows at a time (the (rows, W, W) mask and the activations
        stay small), writing cache columns 0..W-1; draw every row's first token."""
        q = torch.arange(W, device=self.dev)
        per = max(1, min(n, (1 << 24) // (W * W)))
        for r0 in range(0, n, per):
            r1 = min(n, r0 + per)
            start = self.start[r0:r1, None]
            pos = (q[None] - start).clamp(min=0)                                   # (r, W)
            keys = q[None, None, :]
            mask = (keys <= q[None, :, None]) & (keys >= start[:, :, None])
            mask = (mask | (keys == q[None, :, None]))[:, None]                     # padding rows see themselves
            h = self._forward(ids[r0:r1], pos, q, mask, [k[r0:r1] for k in self.ks], [v[r0:r1] for v in self.vs], W)
            tok, lp = self._pick(h[:, -1], temperature, top_p)
            self.tok[r0:r1] = tok
            self.out[r0:r1, 0] = tok
            self.outlp[r0:r1, 0] = lp
            self.done[r0:r1] = (tok[:, None] == stop).any(-1)
        self.slot.fill_(1)

    def _harvest(self, rows, done, results, steps):
        out, lp = self.out[:len(rows), :steps].tolist(), self.outlp[:len(rows), :steps].tolist()
        for r, (i, d) in enumerate(zip(rows, done)):
            if d and results[i] is None:
                results[i] = cut(out[r], lp[r], self.stop_set)

    def _compact(self, live, steps):
        """Move the live rows to the front of every buffer."""
        self.compactions += 1
        idx = torch.tensor(live, device=self.dev)
        for buf in self.ks + self.vs + [self.tok, self.start, self.done, self.out, self.outlp]:
            buf[:len(live)] = buf.index_select(0, idx)
        self.done[len(live):] = True


def cut(tokens, logps, stop):
    """A row's output up to and including its first stop token -> (tokens, logps, finished).
    logps may be None (Hugging Face generate does not give them)."""
    k = next((i for i, t in enumerate(tokens) if t in stop), None)
    if k is None:
        return tokens, logps, False
    return tokens[:k + 1], logps[:k + 1] if logps is not None else None, True


def bucket(n, cap):
    """The batch size a step runs at: the next power of two (capped), so few graphs exist."""
    b = 1
    while b < n:
        b *= 2
    return min(b, cap)


class Sampler:
    """What a stage samples with. On a GPU, a model training in fp32 gets a bf16 copy (half the
    memory traffic per decode step, no casts), and so does a LoRA model (the adapters merged
    in: no adapter matmuls per step) and a model sharded with FSDP2 (every rank samples from
    whole weights), and with --sampler=compile any model that trains (its copy's weights joined); the
    copy is refreshed from the training weights before each sampling call. Elsewhere (CPU,
    a bf16 inference model) the model samples as it is, its weights joined in place for --sampler=compile. `fast` is
    False where our decoder does not apply: the caller then uses Hugging Face generate on
    `model`."""

    def __init__(self, model, cfg):
        self.train_model, self.cfg = model, cfg
        p = next(model.parameters())
        gpu = p.device.type == "cuda"
        sharded = hasattr(p, "full_tensor")
        fusing = cfg["sampler"] == "compile"
        trains = any(q.requires_grad for q in model.parameters())
        needs_copy = sharded or gpu and (p.dtype == torch.float32 or hasattr(model, "peft_config") or fusing and trains)
        self.model = whole_copy(model, torch.bfloat16 if gpu else p.dtype) if needs_copy else model
        if fusing and (needs_copy or not trains) and supported(self.model) and fusable(decoder_parts(self.model)[1]):
            join_weights(decoder_parts(self.model)[1])
        self.fast = cfg["sampler"] in ("auto", "compile") and supported(self.model)
        self.decoder = Decoder(self.model, cfg["gen_batch"], cfg["max_len"], cfg["cuda_graphs"],
                               cfg["sampler"] == "compile", cfg["top_p_draw"], cfg["decode_attention"]) \
            if self.fast else None

    def refresh(self):
        """Copy the training weights into the sampling copy (in place: captured graphs stay valid)."""
        if self.model is self.train_model:
            return
        with torch.no_grad():
            mine = dict(self.model.named_parameters())
            for name, w in whole_weights(self.train_model):
                mine[name].copy_(w)

    def sample(self, prompts, max_new, temperature, top_p, stop):
        """At most gen_batch prompts (id lists) -> [(tokens, logps, finished)]."""
        was = self.model.training
        self.model.eval()
        try:
            return self.decoder.sample(prompts, max_new, temperature, top_p, stop)
        finally:
            self.model.train(was)


def whole_weights(model):
    """(name, tensor) for every weight of the plain model a training model stands for:
    FSDP2 shards gathered (a collective: every rank must call), LoRA adapters merged into
    their base layers (W + scale * B @ A), names as the plain model has them."""
    if not hasattr(model, "peft_config"):
        for name, p in model.named_parameters():
            yield name, p.full_tensor() if hasattr(p, "full_tensor") else p
        return
    inner = model.get_base_model()
    modules = dict(inner.named_modules())
    for name, p in inner.named_parameters():
        if "lora_" in name:
            continue
        mod = modules.get(name[:-len(".base_layer.weight")]) if name.endswith(".base_layer.weight") else None
        if mod is not None and hasattr(mod, "get_delta_weight"):  # one merged weight at a time
            for a in mod.active_adapters:
                if a in mod.lora_A:
                    p = p + mod.get_delta_weight(a).to(p.dtype)
        yield name.replace(".base_layer", ""), p


def whole_copy(model, dtype):
    """A plain copy of a training model in dtype (whole_weights: shards gathered, adapters
    merged), built without a temporary full-precision one: the module tree on the meta
    device, then storage on the model's device, then the weights (and buffers) copied in."""
    base = model.get_base_model() if hasattr(model, "peft_config") else model
    dev = next(model.parameters()).device
    with torch.device("meta"):
        twin = type(base)(base.config)
    twin = twin.to(dtype=dtype).to_empty(device=dev)
    twin.tie_weights()  # the conversions above untie a shared embedding / LM head
    with torch.no_grad():
        mine = dict(twin.named_parameters())
        for name, w in whole_weights(model):
            mine[name].copy_(w)
        mine_b = dict(twin.named_buffers())
        for name, b in base.named_buffers():   # rotary frequencies: fp32, as the original keeps them
            if name in mine_b:
                mine_b[name].data = b.detach().clone()
    twin.generation_config = copy.deepcopy(base.generation_config)
    return twin.eval().requires_grad_(False)
