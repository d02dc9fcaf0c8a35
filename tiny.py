"""The tiny built-in model, so that every stage runs offline on a fresh machine: a
Llama-style decoder configured from scratch (a few million parameters) and a byte-level BPE
tokenizer trained on the project's own corpus (tasks, seed solutions, rendered prompts);
saved with save_pretrained, AutoModelForCausalLM / AutoTokenizer load it like any other
model (policy.load). Also real model shapes with random weights, for benchmarks.

    tok = tiny.build_tokenizer(tiny.corpus("cuda"), vocab_size=2048)
    model = tiny.build_model(cfg, tok)                  # sized by the tiny_* settings
    model = tiny.build_random("7b", cfg, tok, torch.bfloat16, "cuda")
"""
import glob
import os

import torch

import prompts
import taskset

SPECIAL = dict(start="<|im_start|>", end="<|im_end|>", pad="<|pad|>")
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def corpus(language=None):
    """The project's own text: tasks, and the prompts and seed solutions (as responses) of
    one kernel language (None: all of them). One language's, since the vocabulary is capped:
    trained on all three, the merges ran out before the CUDA seeds' lines became tokens,
    replies took 1.8x the tokens and the tiny model no longer learnt Stage 1's data."""
    texts = []
    for path in sorted(glob.glob(os.path.join(taskset.BUILTIN_TASKS, "*.py"))):
        code = open(path).read()
        texts.append(code)
        for lang in [language] if language else prompts.FORMAT:
            texts += [m["content"] for m in prompts.task_prompt(code, lang)]
    for path in sorted(glob.glob(os.path.join(taskset.BUILTIN_TASKS, "seeds", language or "*", "*", "*.py"))):
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


def build_model(cfg, tok):
    """A Llama-architecture decoder from scratch, sized by the tiny_* settings."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(cfg["seed"])
    mc = LlamaConfig(vocab_size=len(tok), hidden_size=cfg["tiny_dim"], intermediate_size=cfg["tiny_dim"] * 8 // 3,
                     num_hidden_layers=cfg["tiny_layers"], num_attention_heads=cfg["tiny_heads"],
                     num_key_value_heads=cfg["tiny_heads"], max_position_embeddings=cfg["max_len"],
                     rope_theta=10000.0, tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, bos_token_id=None)
    return LlamaForCausalLM(mc)


# Real model shapes with random weights (`--model random:7b`), for benchmarks and memory
# checks with nothing downloaded: Qwen2.5(-Coder) configurations, with the tiny tokenizer
# (the prompts are short; the 151,936-entry embedding and LM head keep their real size).
# name: (hidden, intermediate, layers, heads, kv heads, tied embeddings)
SHAPES = {"0.5b": (896, 4864, 24, 14, 2, True), "1.5b": (1536, 8960, 28, 12, 2, True),
          "3b": (2048, 11008, 36, 16, 2, True), "7b": (3584, 18944, 28, 28, 4, False),
          "14b": (5120, 13824, 48, 40, 8, False), "32b": (5120, 27648, 64, 40, 8, False)}


def build_random(name, cfg, tok, dtype, dev):
    """A Qwen2 decoder of a named shape, random weights, built directly on `dev`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    if name not in SHAPES:
        raise ValueError(f"random:{name}: shapes are {', '.join(SHAPES)}")
    d, inter, layers, heads, kv, tied = SHAPES[name]
    mc = Qwen2Config(vocab_size=151936, hidden_size=d, intermediate_size=inter, num_hidden_layers=layers,
                     num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=32768,
                     rope_theta=1e6, tie_word_embeddings=tied, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, bos_token_id=None, dtype=dtype)
    torch.manual_seed(cfg["seed"])
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialised in its final dtype: no fp32 detour for 32B
    try:
        with torch.device(dev):
            return Qwen2ForCausalLM(mc)
    finally:
        torch.set_default_dtype(prev)
