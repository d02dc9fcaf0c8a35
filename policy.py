"""The policy: any Hugging Face causal LM, or the tiny built-in one; sampling, per-token
log-probs, checkpoints. Runs no candidate code.

    import policy
    model, tok = policy.load(cfg)                 # cfg["model"]: "" = the tiny built-in model
    model, tok = policy.load(cfg, "out/small/sft", train=True)
    outs = policy.generate(model, tok, [messages, ...], cfg, n=4)   # [[Sample(text, ids, ...)]]
    b = policy.pack(tok, prompt_ids, completion_ids)                 # padded batch + completion mask
    logp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])   # (B, T-1)

The tiny model exists so that every stage runs offline on a fresh machine: a Llama-style
decoder configured from scratch (a few million parameters) and a byte-level BPE tokenizer
trained on the project's own corpus (tasks, seed solutions, rendered prompts), saved with
save_pretrained so AutoModelForCausalLM / AutoTokenizer load it like any other model.
"""
import glob
import os
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import prompts
import taskset

SPECIAL = dict(start="<|im_start|>", end="<|im_end|>", pad="<|pad|>")
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# ----------------------------------------------------------------------------------------
# The tiny built-in model

def tiny_corpus():
    """The project's own text: tasks, seed solutions (as responses), rendered prompts."""
    texts = []
    for path in sorted(glob.glob(os.path.join(taskset.BUILTIN_TASKS, "*.py"))):
        code = open(path).read()
        texts.append(code)
        for backend in prompts.FORMAT:
            texts += [m["content"] for m in prompts.task_prompt(code, backend)]
    for path in sorted(glob.glob(os.path.join(taskset.BUILTIN_TASKS, "seeds", "*", "*", "*.py"))):
        texts.append(prompts.completion(open(path).read()))
    return texts


def build_tokenizer(texts, vocab_size):
    """Byte-level BPE trained on `texts` (lossless on any text), with chat special tokens.
    Merges may cross words within a line: on this small, repetitive corpus they end up
    covering whole lines (about 40 characters a token on the seed solutions; unseen code
    falls back to about 2), so the tiny model's context (max_len) holds a contrastive
    prompt with two exemplars."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\n]*\n?"), behavior="isolated"),  # one piece per line
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=SPECIAL["end"], pad_token=SPECIAL["pad"],
                                   chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False,
                                   model_max_length=1 << 20)


def build_tiny(cfg, tok):
    """A Llama-architecture decoder from scratch, sized by the tiny_* settings."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(cfg["seed"])
    mc = LlamaConfig(vocab_size=len(tok), hidden_size=cfg["tiny_dim"], intermediate_size=cfg["tiny_dim"] * 8 // 3,
                     num_hidden_layers=cfg["tiny_layers"], num_attention_heads=cfg["tiny_heads"],
                     num_key_value_heads=cfg["tiny_heads"], max_position_embeddings=cfg["max_len"],
                     rope_theta=10000.0, tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, bos_token_id=None)
    return LlamaForCausalLM(mc)


# ----------------------------------------------------------------------------------------
# Loading

def device_of(cfg):
    if cfg["device"] != "auto":
        return torch.device(cfg["device"])
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_model_path(path):
    """Raise FileNotFoundError for a local path that is not a folder. A hub name
    ("owner/name") passes: from_pretrained looks for it in the hub cache."""
    local = path.startswith((".", "/", "~")) or path.count("/") > 1 or os.path.exists(path)
    if local and not os.path.isdir(os.path.expanduser(path)):
        raise FileNotFoundError(f"{path}: no such checkpoint or model folder")


def load(cfg, path=None, train=False):
    """-> (model, tokenizer). path: a checkpoint folder, a local model or a hub name; None
    means cfg["model"], and "" there builds the tiny model (untrained). Training keeps fp32
    weights (the master copy; forward passes autocast to bf16 on GPU); inference loads bf16
    on GPU unless dtype says otherwise."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # shard-writing bars at every checkpoint are noise
    dev = device_of(cfg)
    path = path if path is not None else cfg["model"]
    if cfg["dtype"] == "auto":
        dtype = torch.float32 if (train or dev.type == "cpu") else torch.bfloat16
    else:
        dtype = dict(bf16=torch.bfloat16, fp32=torch.float32)[cfg["dtype"]]
    if not path:
        tok = build_tokenizer(tiny_corpus(), cfg["tiny_vocab"])
        model = build_tiny(cfg, tok).to(dtype)
    else:
        check_model_path(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if tok.pad_token is None:  # many base models have none; padding is masked anyway
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"{path}: the tokenizer has no chat template (use an instruct/chat model)")
    return model.to(dev), tok


def autocast(model):
    """bf16 autocast for fp32 weights on GPU; a no-op elsewhere."""
    p = next(model.parameters())
    on = p.device.type == "cuda" and p.dtype == torch.float32
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=on) if p.device.type == "cuda" else \
        torch.autocast("cpu", enabled=False)


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


@torch.no_grad()
def generate(model, tok, messages, cfg, n=1, progress=None, desc="sampling"):
    """Sample n completions per prompt -> per prompt a list of n Samples. Prompts longer
    than max_len get an empty, unfinished reply rather than stopping the run."""
    from transformers import GenerationConfig
    dev = next(model.parameters()).device
    jobs = [(i, prompt_ids(tok, m)) for i, m in enumerate(messages) for _ in range(n)]
    # similar lengths together: less padding; longest first so a memory problem shows early
    jobs.sort(key=lambda j: -len(j[1]))
    outs = [[] for _ in messages]
    stop = eos_ids(model, tok)
    bar = None
    if (cfg["progress"] if progress is None else progress) and len(jobs) > cfg["gen_batch"]:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), desc=desc, unit="sample", dynamic_ncols=True)
    was_training = model.training
    model.eval()
    for s in range(0, len(jobs), cfg["gen_batch"]):
        chunk = jobs[s:s + cfg["gen_batch"]]
        room = cfg["max_len"] - max(len(p) for _, p in chunk)
        if room <= 0:
            for i, p in chunk:
                outs[i].append(Sample("", [], p, False))
            continue
        width = max(len(p) for _, p in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, (_, p) in enumerate(chunk):  # left padding: every prompt ends where sampling starts
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        gc = GenerationConfig(do_sample=cfg["temperature"] > 0, temperature=cfg["temperature"] or None,
                              top_p=cfg["top_p"] if cfg["temperature"] > 0 else None, top_k=0,
                              max_new_tokens=min(cfg["max_new_tokens"], room),
                              eos_token_id=stop, pad_token_id=tok.pad_token_id)
        with autocast(model):
            seq = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), generation_config=gc)
        for r, (i, p) in enumerate(chunk):
            new = seq[r, width:].tolist()
            cut = next((k for k, t in enumerate(new) if t in stop), None)
            new = new[:cut + 1] if cut is not None else new
            text = tok.decode(new[:-1] if cut is not None else new, skip_special_tokens=False)
            outs[i].append(Sample(text, new, p, cut is not None))
        if bar:
            bar.update(len(chunk))
    if bar:
        bar.close()
    model.train(was_training)
    return outs


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


def _chunk_logp(h, weight, bias, targets, temperature):
    # h (B, C, D), targets (B, C) -> (B, C): log p(target) under logits / temperature
    # fp32 logits: bf16 ones would be off by ~0.05 nats, too coarse for PPO ratios
    logits = F.linear(h.float(), weight.float(), None if bias is None else bias.float()) / temperature
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def completion_logprobs(model, input_ids, attention_mask, temperature=1.0, chunk=None):
    """Per-token log-probs of each next token -> (B, T-1): entry t scores input_ids[:, t+1].
    Positions come from the attention mask, as in generate(), so left or right padding gives
    the same numbers. The vocabulary projection runs chunk by chunk (recomputed in backward)
    so no (B, T, V) tensor is ever held: with a 150k vocabulary that would be gigabytes."""
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with autocast(model):
        h = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                position_ids=pos).last_hidden_state[:, :-1]  # (B, T-1, D)
    head = model.get_output_embeddings()
    targets = input_ids[:, 1:]
    # about 256 MB of fp32 logits per chunk; one chunk (no recompute) when it all fits
    chunk = chunk or max(1, (1 << 26) // (h.shape[0] * head.weight.shape[0]))
    outs, one = [], h.shape[1] <= chunk
    for s in range(0, h.shape[1], chunk):
        args = (h[:, s:s + chunk], head.weight, head.bias, targets[:, s:s + chunk], temperature)
        if torch.is_grad_enabled() and not one:
            outs.append(torch.utils.checkpoint.checkpoint(_chunk_logp, *args, use_reentrant=False))
        else:
            outs.append(_chunk_logp(*args))
    return torch.cat(outs, dim=1)


# ----------------------------------------------------------------------------------------
# Checkpoints: Hugging Face format plus train_state.pt

def save_checkpoint(out, model, tok, opt, step, cfg, extra=None):
    """Write the model (loadable by AutoModelForCausalLM), tokenizer and training state
    (optimizer, step, config, RNG). Files are written to a temporary folder and moved into
    place, train_state.pt last, so a kill mid-save leaves the previous checkpoint usable."""
    tmp = os.path.join(out, ".ckpt-tmp")
    os.makedirs(tmp, exist_ok=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    state = dict(step=step, config=cfg, extra=extra or {}, optimizer=opt.state_dict() if opt else None,
                 rng=dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state(),
                          cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None))
    torch.save(state, os.path.join(tmp, "train_state.pt"))
    names = sorted(os.listdir(tmp), key=lambda n: n == "train_state.pt")
    for name in names:
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    os.rmdir(tmp)


def has_checkpoint(out):
    return os.path.exists(os.path.join(out, "train_state.pt")) and os.path.exists(os.path.join(out, "config.json"))


def load_checkpoint(out, cfg, train=True):
    """-> (model, tokenizer, state) from save_checkpoint's folder; RNG state restored."""
    if not has_checkpoint(out):
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


def is_done(out):
    """True when a stage folder holds a finished checkpoint."""
    if not has_checkpoint(out):
        return False
    # mmap: reading one flag must not pull a large model's optimizer state into memory
    state = torch.load(os.path.join(out, "train_state.pt"), map_location="cpu", weights_only=False, mmap=True)
    return bool((state.get("extra") or {}).get("done"))


def count_params(model):
    return sum(p.numel() for p in model.parameters())

