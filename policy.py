"""The policy: any Hugging Face causal LM, or the tiny built-in one; sampling, per-token
log-probs, checkpoints. Runs no candidate code.

    import policy
    model, tok = policy.load(cfg)                 # cfg["model"]: "" = the tiny built-in model
    model, tok = policy.load(cfg, "out/small/sft", train=True)
    outs = policy.generate(model, tok, [messages, ...], cfg, n=4)   # [[Sample(text, ids, ...)]]
    b = policy.pack(tok, prompt_ids, completion_ids)                 # padded batch + completion mask
    logp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])   # (B, T-1)

The tiny built-in model and its tokenizer are built in tiny.py; loaded here like any other.
"""
import contextlib
import json
import os
import random
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import common
import kernels
import prompts
import sampler
import taskset
import tiny
import weights

# ----------------------------------------------------------------------------------------
# Loading

def device_of(cfg):
    if cfg["device"] != "auto":
        return torch.device(cfg["device"])
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def preflight(cfg, paths=()):
    """What the policy needs, checked before any work starts, one line each: the device, the
    optional package LoRA needs, and every model or checkpoint the run will load."""
    if cfg["device"].startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {cfg['device']}: no CUDA GPU is visible here (use --device auto or cpu)")
    local = [p for p in paths if p and not p.startswith("random:") and not weights.hub_name(p)]
    if cfg["lora_rank"] > 0 or any(adapter_base(p) for p in local if os.path.isdir(os.path.expanduser(p))):
        try:
            import peft  # noqa: F401
        except ImportError:
            raise ValueError("LoRA (--lora_rank, or a LoRA checkpoint) needs peft: "
                             "pip install -r requirements.txt") from None
    for p in paths:
        weights.check_model_path(p)


def load(cfg, path=None, train=False):
    """-> (model, tokenizer). path: a checkpoint folder, a local model or a hub name; None
    means cfg["model"], and "" there builds the tiny model (untrained). Training keeps fp32
    weights (the master copy; forward passes autocast to bf16 on GPU), or with dtype bf16
    bf16 weights whose fp32 masters the optimizer keeps (optim.Bf16Master); inference loads
    bf16 on GPU unless dtype says otherwise. With lora_rank > 0, training wraps the model in
    LoRA adapters (its frozen base in bf16 on GPU); a LoRA checkpoint (an adapter folder)
    loads onto its base, trainable for training, merged into plain weights for inference."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # shard-writing bars at every checkpoint are noise
    dev = device_of(cfg)
    path = path if path is not None else cfg["model"]
    weights.check_model_path(path)
    path = weights.resolve(path)
    lora = train and cfg["lora_rank"] > 0
    fsdp = train and cfg["fsdp"] and int(os.environ.get("WORLD_SIZE", "1")) > 1
    if fsdp:  # whole weights on the host; prepare() shards them onto the GPUs
        dev = torch.device("cpu")
    if cfg["dtype"] == "auto":
        frozen_bf16 = dev.type == "cuda" and (lora or not train)
        dtype = torch.bfloat16 if frozen_bf16 else torch.float32
    else:
        dtype = dict(bf16=torch.bfloat16, fp32=torch.float32)[cfg["dtype"]]
    adapter = adapter_base(path) if path and not path.startswith("random:") else None
    if not path or path.startswith("random:"):  # the tokenizer of the language the run writes
        tok = tiny.build_tokenizer(tiny.corpus(kernels.target(cfg)[1]), cfg["tiny_vocab"])
    if not path:
        model = tiny.build_model(cfg, tok).to(dtype)
    elif path.startswith("random:"):
        model = tiny.build_random(path[len("random:"):], cfg, tok, dtype, dev)
    else:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(adapter or path, dtype=dtype)
    if tok.pad_token is None:  # many base models have none; padding is masked anyway
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"{path}: the tokenizer has no chat template (use an instruct/chat model)")
    model = model.to(dev)
    if adapter:
        from peft import PeftModel
        with _quiet_peft():
            model = PeftModel.from_pretrained(model, path, is_trainable=lora)
        if not lora:  # inference (or full fine-tuning from a LoRA stage): plain weights
            model = model.merge_and_unload()
    elif lora:
        from peft import LoraConfig, get_peft_model
        with _quiet_peft():
            model = get_peft_model(model, LoraConfig(
                r=cfg["lora_rank"], lora_alpha=cfg["lora_alpha"] or 2 * cfg["lora_rank"], lora_dropout=0.0,
                target_modules=[m.strip() for m in cfg["lora_targets"].split(",") if m.strip()],
                task_type="CAUSAL_LM"))
    if cfg["grad_ckpt"] not in ("auto", "on", "off"):
        raise ValueError(f"--grad_ckpt is auto, on or off, not {cfg['grad_ckpt']!r}")
    if train and (cfg["grad_ckpt"] == "on" or (cfg["grad_ckpt"] == "auto" and count_params(model) > 1e8)):
        # recompute each layer in backward: one layer's activations at a time instead of all
        kw = dict(use_reentrant=False)
        if hasattr(model, "activation_checkpointing_enable"):  # the newer transformers name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
        # auto on a GPU: per batch, only as many layers as memory needs (fit_checkpointing)
        model.ckpt_auto = cfg["grad_ckpt"] == "auto" and dev.type == "cuda"
    if not train:  # inference: no gradients (the sampler packs such a model's weights in place)
        model.requires_grad_(False)
    return model, tok


def activation_bytes(config, tokens):
    """What one decoder layer keeps for backward over `tokens` tokens, about: 52 bytes per
    unit of width (the fp32 residual and norms, bf16 inputs of the projections, attention's
    q, k, v and output) and 8 per unit of the MLP's (its four bf16 intermediates). On the
    H100 at the 1.5B shape, 4 x 1,324 tokens: no layer recomputed peaked 21.8 GiB above all
    recomputed; this gives 20.9 for the 28 layers (the margin covers the rest)."""
    return tokens * (52 * config.hidden_size + 8 * getattr(config, "intermediate_size", 4 * config.hidden_size))


def fit_checkpointing(model, tokens, margin=0.15):
    """--grad_ckpt auto on a GPU: before a training forward over `tokens` tokens, keep the
    activations of as many decoder layers as fit in the memory free now (less `margin` of
    the GPU, and the gradients still to be allocated) and recompute the rest in backward;
    recomputation costs a layer's forward again, so it is paid only where memory needs it."""
    layers = [m for m in model.get_decoder().layers if hasattr(m, "gradient_checkpointing")]
    if not getattr(model, "ckpt_auto", False) or not layers:
        return
    dev = next(model.parameters()).device
    free, total = torch.cuda.mem_get_info(dev)
    free += torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad and p.grad is None)
    keep = int(max(0, free - margin * total - grads) // max(1, activation_bytes(model.config, tokens)))
    for i, m in enumerate(layers):
        m.gradient_checkpointing = i >= keep


@contextlib.contextmanager
def _quiet_peft():
    """peft reads transformers' deprecated `is_gradient_checkpointing` while wrapping a model,
    which prints a FutureWarning meant for peft's authors, not for our users."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        yield


def adapter_base(path):
    """The base model of a LoRA checkpoint folder, or None for anything else."""
    f = os.path.join(os.path.expanduser(path), "adapter_config.json")
    if not os.path.exists(f):
        return None
    base = json.load(open(f)).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path}: adapter_config.json names no base model")
    return base


def reference(cfg, model, start_from):
    """The frozen model the KL term pulls toward (the one training started from), as a
    function (input_ids, attention_mask, temperature) -> log-probs (B, T-1); None when
    beta = 0. Full fine-tuning loads a second, frozen copy (bf16 on GPU). LoRA needs none:
    the reference is the same model with the starting adapter (a frozen second adapter) or,
    when training started from plain weights, with adapters switched off."""
    if cfg["beta"] <= 0:
        return None
    if not hasattr(model, "peft_config"):
        ref, _ = load(cfg, start_from)
        ref.eval().requires_grad_(False)
        return lambda ids, mask, temp: completion_logprobs(ref, ids, mask, temp)
    if start_from and adapter_base(start_from):
        model.load_adapter(start_from, adapter_name="reference", is_trainable=False)

        @contextlib.contextmanager
        def switched():
            model.set_adapter("reference")
            try:
                yield
            finally:
                model.set_adapter("default")  # peft marks the active adapter trainable again
        mode = switched
    else:
        mode = model.disable_adapter

    def ref_logprobs(ids, mask, temp):
        was = model.training
        model.eval()
        with mode():
            out = completion_logprobs(model, ids, mask, temp)
        model.train(was)
        return out
    return ref_logprobs


def autocast(model):
    """bf16 autocast for fp32 weights on GPU; a no-op elsewhere."""
    p = next(model.parameters())
    on = p.device.type == "cuda" and p.dtype == torch.float32
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=on) if p.device.type == "cuda" else \
        torch.autocast("cpu", enabled=False)


@contextlib.contextmanager
def tf32_matmuls(model):
    """On GPU, float32 matrix products in TF32 (fp32 in and out, 10-bit mantissa products,
    fp32 sums) while the update runs: its float32 matmuls are the LM head's, which keeps
    fp32 logits (bf16 ones would round a logit of 20 to steps of 0.125) and was half the
    1.5B update's GPU time in plain fp32 (results/LOG.md). Backward's products too, since
    the flag is read when each kernel starts. The decoder runs in bf16 either way."""
    if next(model.parameters()).device.type != "cuda":
        yield
        return
    m = torch.backends.cuda.matmul
    before, m.allow_tf32 = m.allow_tf32, True
    try:
        yield
    finally:
        m.allow_tf32 = before


def prompt_ids(tok, messages):
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def eos_ids(model, tok):
    """Every token that ends a reply (instruct models often list several)."""
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = ids if isinstance(ids, list) else [ids] if ids is not None else []
    return sorted(set(ids) | {tok.eos_token_id})


# ----------------------------------------------------------------------------------------
# Sampling

@dataclass
class Sample:
    """One sampled reply."""
    text: str          # decoded, without the EOS token
    ids: list          # the sampled token ids, EOS included when the reply finished: the
                       # exact tokens whose log-probs RL later scores
    prompt_ids: list   # the prompt's tokens, as the model saw them
    finished: bool     # False: cut at max_new_tokens (or the prompt left no room)
    logps: list = None  # each token's log-prob as the sampler saw it (fast sampler only)


@torch.no_grad()
def generate(model, tok, messages, cfg, n=1, progress=None, desc="sampling"):
    """Sample n completions per prompt -> per prompt a list of n Samples. model: a model or
    a sampler.Sampler (which keeps its bf16 copy and captured graphs between calls).
    Prompts longer than max_len get an empty, unfinished reply rather than stopping the run."""
    s = model if isinstance(model, sampler.Sampler) else sampler.Sampler(model, cfg)
    jobs = [(i, prompt_ids(tok, m)) for i, m in enumerate(messages) for _ in range(n)]
    # similar lengths together: less padding; longest first so a memory problem shows early
    jobs.sort(key=lambda j: -len(j[1]))
    outs = [[] for _ in messages]
    stop = eos_ids(s.model, tok)
    bar = None
    if (cfg["progress"] if progress is None else progress) and len(jobs) > cfg["gen_batch"]:
        bar = common.progress_bar(len(jobs), desc, "sample")
    s.refresh()
    for k in range(0, len(jobs), cfg["gen_batch"]):
        chunk = jobs[k:k + cfg["gen_batch"]]
        room = cfg["max_len"] - max(len(p) for _, p in chunk)
        if room <= 0:
            for i, p in chunk:
                outs[i].append(Sample("", [], p, False))
            continue
        ps = [p for _, p in chunk]
        max_new = min(cfg["max_new_tokens"], room)
        if s.fast:
            rows = s.sample(ps, max_new, cfg["temperature"], cfg["top_p"], stop)
        else:
            rows = [sampler.cut(r, None, set(stop)) for r in hf_generate(s.model, tok, ps, max_new, stop, cfg)]
        for (i, p), (new, lps, finished) in zip(chunk, rows):
            text = tok.decode(new[:-1] if finished else new, skip_special_tokens=False)
            outs[i].append(Sample(text, new, p, finished, lps))
        if bar:
            bar.update(len(chunk))
    if bar:
        bar.close()
    return outs


def hf_generate(model, tok, prompts, max_new, stop, cfg):
    """Hugging Face generate for models our decoder does not cover -> each row's new ids."""
    from transformers import GenerationConfig
    dev = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):  # left padding: every prompt ends where sampling starts
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    gc = GenerationConfig(do_sample=cfg["temperature"] > 0, temperature=cfg["temperature"] or None,
                          top_p=cfg["top_p"] if cfg["temperature"] > 0 else None,
                          top_k=0 if cfg["temperature"] > 0 else None,
                          max_new_tokens=max_new, eos_token_id=stop, pad_token_id=tok.pad_token_id)
    was = model.training
    model.eval()
    with autocast(model):
        seq = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), generation_config=gc)
    model.train(was)
    return seq[:, width:].tolist()


# ----------------------------------------------------------------------------------------
# Batches and log-probs

def pack(tok, prompts_ids, completions_ids, max_len=None):
    """Prompt and completion token lists -> right-padded input_ids, attention_mask and
    completion_mask (1 on completion tokens, EOS included; 0 on prompt and padding), all
    (B, T). A sequence over max_len loses the end of its completion."""
    seqs = [list(p) + list(c) for p, c in zip(prompts_ids, completions_ids)]
    if max_len:
        seqs = [s[:max_len] for s in seqs]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros_like(ids)
    for r, (s, p) in enumerate(zip(seqs, prompts_ids)):
        ids[r, :len(s)] = torch.tensor(s)
        attn[r, :len(s)] = 1
        cmask[r, len(p):len(s)] = 1
    return dict(input_ids=ids, attention_mask=attn, completion_mask=cmask)


def sft_batch(tok, examples, max_len):
    """[dict(prompt=messages, completion=text)] -> pack()ed batch, EOS appended. Examples
    that carry prompt_ids and completion_ids (a model's own samples) use those tokens as
    sampled, since re-tokenizing the text need not give them back."""
    ps, cs = [], []
    for e in examples:
        if "completion_ids" in e:
            ps.append(e["prompt_ids"])
            cs.append(e["completion_ids"])
        else:
            ps.append(prompt_ids(tok, e["prompt"]))
            cs.append(tok(e["completion"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    return pack(tok, ps, cs, max_len)


class _Bf16Head(torch.autograd.Function):
    """h (N, D) bf16 @ w (V, D).T bf16 -> (N, V) fp32 logits: bf16 products (exact in fp32)
    summed in fp32, on a GPU without an fp32 copy of the 150k-row weight. Backward in bf16,
    the logits' gradient rounded to bf16 as autocast's layers round theirs."""

    out_dtype = True  # False once this torch turned mm's out_dtype down: fp32 products from then on

    @staticmethod
    def forward(ctx, h, w):
        ctx.save_for_backward(h, w)
        if h.is_cuda and _Bf16Head.out_dtype:
            try:
                return torch.mm(h, w.t(), out_dtype=torch.float32)
            except torch.OutOfMemoryError:
                raise
            except (TypeError, NotImplementedError, RuntimeError):  # no such argument, or no kernel for it
                _Bf16Head.out_dtype = False
        return h.float() @ w.float().t()

    @staticmethod
    def backward(ctx, g):
        h, w = ctx.saved_tensors
        g = g.to(h.dtype)
        return g @ w, (g.t() @ h if ctx.needs_input_grad[1] else None)  # LoRA's head is frozen


def logp_of(logits, targets, temperature: float):
    """logits (..., V) fp32, targets (...) -> (...): log p(target) under logits / temperature.
    Compiled under --compile_update: one pass over the logits forward and one backward,
    where eager PyTorch makes five or six (the logits are 150k wide: the passes cost)."""
    logits = logits / temperature
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


COMPILED_LOGP = None


def compiled_logp():
    global COMPILED_LOGP
    COMPILED_LOGP = COMPILED_LOGP or torch.compile(logp_of, dynamic=True)
    return COMPILED_LOGP


def _chunk_logp(h, weight, bias, targets, temperature, tail=logp_of):
    # h (B, C, D), targets (B, C) -> (B, C): log p(target) under logits / temperature
    # fp32 logits: bf16 ones would be off by ~0.05 nats, too coarse for PPO ratios
    if h.dtype == weight.dtype == torch.bfloat16 and bias is None:
        logits = _Bf16Head.apply(h.reshape(-1, h.shape[-1]), weight).view(*h.shape[:-1], -1)
    else:
        logits = F.linear(h.float(), weight.float(), None if bias is None else bias.float())
    return tail(logits, targets, float(temperature))


def right_padded(attention_mask):
    """True when every row's tokens come first and its padding after (pack() lays batches out
    so): then causal attention alone is exact for every real token."""
    m = attention_mask.bool()
    return bool(m[:, 0].all() and (m[:, 1:] <= m[:, :-1]).all())


def completion_logprobs(model, input_ids, attention_mask, temperature=1.0, chunk=None):
    """Per-token log-probs of each next token -> (B, T-1): entry t scores input_ids[:, t+1].
    Positions come from the attention mask, as in generate(), so left or right padding gives
    the same numbers. The vocabulary projection runs chunk by chunk (recomputed in backward)
    so no (B, T, V) tensor is ever held: with a 150k vocabulary that would be gigabytes."""
    if isinstance(model, Sharded):  # FSDP2: through the root unit's forward (see Sharded)
        return model(input_ids, attention_mask, temperature, chunk)
    if right_padded(attention_mask):
        # no mask: attention runs causal only (flash) instead of masked (a 1.5B update over
        # 2,100-token sequences 12% faster on the H100); a real token never sees the padding
        # after it, and positions 0..T-1 are the ones the mask gives it
        B, T = input_ids.shape
        mask, pos = None, torch.arange(T, device=input_ids.device).expand(B, T)
    else:
        mask, pos = attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if model.training and torch.is_grad_enabled():
        fit_checkpointing(model, input_ids.numel())
    with autocast(model):
        h = model.get_decoder()(input_ids=input_ids, attention_mask=mask, position_ids=pos,
                                use_cache=False).last_hidden_state[:, :-1]  # (B, T-1, D)
    head = model.get_output_embeddings()
    targets = input_ids[:, 1:]
    tail = compiled_logp() if getattr(model, "compiled_update", False) else logp_of
    # about 256 MB of fp32 logits per chunk; one chunk (no recompute) when it all fits
    chunk = chunk or max(1, (1 << 26) // (h.shape[0] * head.weight.shape[0]))
    outs, one = [], h.shape[1] <= chunk
    for s in range(0, h.shape[1], chunk):
        args = (h[:, s:s + chunk], head.weight, head.bias, targets[:, s:s + chunk], temperature, tail)
        if torch.is_grad_enabled() and not one:
            outs.append(torch.utils.checkpoint.checkpoint(_chunk_logp, *args, use_reentrant=False))
        else:
            outs.append(_chunk_logp(*args))
    return torch.cat(outs, dim=1)


class Sharded(torch.nn.Module):
    """A causal LM sharded with FSDP2 (torch.distributed.fsdp.fully_shard) for training
    under torchrun: each decoder layer is a unit, and this wrapper, whose forward is
    completion_logprobs, is the root unit. The root gathers the embedding, final norm and
    LM head for the whole computation (the chunked LM head uses its weight directly, so a
    plain HF model as root would leave it sharded) and reduces their gradients after."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, attention_mask, temperature=1.0, chunk=None):
        return completion_logprobs(self.lm, input_ids, attention_mask, temperature, chunk)


def prepare(model, cfg, world):
    """The model as training uses it: itself, or with fsdp on under torchrun, Sharded:
    fp32 master shards, bf16 compute, fp32 gradient reduction (FSDP2 averages gradients
    over ranks; optim.all_reduce_grads turns the average back into the sum the losses
    are normalised for). --compile_update compiles each decoder layer (shapes dynamic: one
    compile serves every batch) and the log-prob arithmetic (logp_of)."""
    if cfg.get("compile_update") and cfg["fsdp"] and world > 1:  # layers compiled in place, then sharded: not run yet
        raise ValueError("--compile_update has not been tried under --fsdp (FSDP2): drop one of them")
    if cfg.get("compile_update"):
        for layer in model.get_decoder().layers:
            layer.compile(dynamic=True)
        model.compiled_update = True
    if not cfg["fsdp"] or world == 1:
        return model
    if hasattr(model, "peft_config"):
        raise ValueError("--fsdp shards full fine-tuning; LoRA models fit on one GPU (drop --lora_rank or --fsdp)")
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("--fsdp keeps fp32 master shards and computes in bf16 by itself: leave --dtype auto")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    cuda = torch.cuda.is_available() and cfg["device"] != "cpu"
    mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if cuda else None, reduce_dtype=torch.float32)
    units = list(model.get_decoder().layers)
    for layer in units:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    root = Sharded(model)
    fully_shard(root, mesh=mesh, mp_policy=mp)
    return root


def unwrap(model):
    """The Hugging Face model inside (Sharded keeps it as .lm)."""
    return model.lm if isinstance(model, Sharded) else model


# ----------------------------------------------------------------------------------------
# Checkpoints: Hugging Face format plus train_state.pt

def save_checkpoint(out, model, tok, opt, step, cfg, extra=None, write=True):
    """Write the model (loadable by AutoModelForCausalLM), tokenizer and training state
    (optimizer, step, config, RNG). Files are written to a temporary folder and moved into
    place, train_state.pt last, so a kill mid-save leaves the previous checkpoint usable.
    Under torchrun every rank calls it and the one with write=True writes (a Sharded
    model's full weights and optimizer state are gathered from all ranks first)."""
    weights = optim = None
    if isinstance(model, Sharded):
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = {k[len("lm."):]: v for k, v in get_model_state_dict(model, options=full).items()}
        optim = get_optimizer_state_dict(model, opt, options=full) if opt else None
    elif opt:
        optim = opt.state_dict()
    if not write:
        return
    tmp = os.path.join(out, ".ckpt-tmp")
    os.makedirs(tmp, exist_ok=True)
    if hasattr(model, "peft_config"):  # LoRA: the adapter, naming a base model on disk
        save_adapter(model, tok, out, tmp)
    else:
        unwrap(model).save_pretrained(tmp, state_dict=weights)
    tok.save_pretrained(tmp)
    state = dict(step=step, config=cfg, extra=extra or {}, optimizer=optim,
                 rng=dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state(),
                          cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None))
    torch.save(state, os.path.join(tmp, "train_state.pt"))
    names = sorted(os.listdir(tmp), key=lambda n: n == "train_state.pt")
    for name in names:
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    os.rmdir(tmp)


def save_adapter(model, tok, out, tmp):
    """Write the trained adapter (not the frozen base) into tmp. Its adapter_config.json
    names the base by absolute path; a base with no folder (the tiny built-in model) is
    saved once, into out/base/."""
    base = model.peft_config["default"].base_model_name_or_path
    if not base or not (os.path.isdir(base) or hub_name(base)):
        base = os.path.join(out, "base")
        if not os.path.exists(os.path.join(base, "config.json")):
            inner = model.get_base_model()   # its linear layers hold base_layer + lora_*
            plain = type(inner)(inner.config)
            plain.load_state_dict({k.replace(".base_layer", ""): v for k, v in inner.state_dict().items()
                                   if "lora_" not in k})
            plain.save_pretrained(base)
            tok.save_pretrained(base)
    model.peft_config["default"].base_model_name_or_path = os.path.abspath(base) if os.path.isdir(base) else base
    model.save_pretrained(tmp, selected_adapters=["default"])


def load_checkpoint(out, cfg, train=True):
    """-> (model, tokenizer, state) from save_checkpoint's folder; RNG state restored."""
    if not common.has_checkpoint(out):
        raise FileNotFoundError(f"{out}: no checkpoint (config.json and train_state.pt)")
    model, tok = load(cfg, out, train=train)
    state = torch.load(os.path.join(out, "train_state.pt"), map_location="cpu", weights_only=False)
    rng = state.get("rng") or {}
    if rng:
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"][:torch.cuda.device_count()])
    return model, tok, state


def count_params(model):
    return sum(p.numel() for p in model.parameters())
