"""The one config mechanism every script shares: named presets plus checked overrides.

    python evaluate.py --config small --workers=4 --tasks tasks
    python evaluate.py --tasks=tasks --solutions tasks/seeds --check_seeds 3

Every setting of every script lives once in DEFAULTS (its type is the type of its default);
a preset is a named set of overrides; `--key=value` or `--key value` overrides both. Unknown
keys and values of the wrong type are errors, with a suggestion for near misses.
"""
import difflib
import json
import os

DEFAULTS = dict(
    # --- the evaluator (kernels.py) ---
    backend="auto",          # auto | cuda | cpu: what candidates are written for and timed on
    gpus="",                 # comma list of GPU indices for timing workers; "" = all visible
    workers=0,               # parallel compile workers; 0 = one per free CPU core
    cache_dir="",            # build cache; "" = $CUDAL1_CACHE or ~/.cache/cudal1
    compile_timeout=600.0,   # seconds for importing a candidate (its builds included)
    run_timeout=300.0,       # seconds for checking and timing one candidate
    check_seeds=2,           # weight seeds for the correctness check (DESIGN.md 4: at least 2)
    check_inputs=2,          # fresh input sets per weight seed
    allow_lowp=False,        # accept fp16/bf16/TF32 arithmetic in fp32 tasks
    require_kernel=False,    # reject candidates that never call a compiled kernel
    timing_rounds=5,         # rounds of interleaved ref/candidate runs (median of round medians)
    max_rounds=10,           # extra rounds allowed when rounds disagree
    round_seconds=0.15,      # target length of one round (both programs)
    min_runs=3,              # timed calls per program per round, at least
    max_runs=100,            # ... and at most
    spread_limit=0.05,       # rounds disagreeing by more than this get more rounds
    suspicious_speedup=10.0, # speedups above this are measured again, longer
    baseline="eager",        # eager | compile: what the reference is timed as
    # --- evaluate.py ---
    tasks="builtin",         # builtin | tasks folder | KernelBench folder | .py | .jsonl
    solutions="",            # .py | folder | .jsonl (incl. the CUDA-L1 release layout)
    only="",                 # comma list of task names (or level_problem ids) to keep
    reference_only=False,    # just load and run each reference once (no candidates)
    out="out",               # output root
    progress=True,           # progress bars
)

PRESETS = {
    # The offline default: built-in suite, backend picked from the machine.
    "small": dict(),
    # Full KernelBench problems are large; give them room.
    "kernelbench": dict(run_timeout=900.0, check_inputs=1),
}


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


def parse(argv, defaults=DEFAULTS):
    """argv (without the program name) -> config dict. Raises ValueError on bad input."""
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
            elif nxt is None:
                raise ValueError(f"--{key} needs a value")
            else:
                val, i = nxt, i + 1
        pairs.append((key, val))
        i += 1
    for key, val in pairs:
        if key not in defaults:
            near = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f" (did you mean --{near[0]}?)" if near else ""
            raise ValueError(f"unknown setting --{key}{hint}")
    preset = dict(pairs).get("config")
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        cfg.update(PRESETS[preset])
    for key, val in pairs:
        if key != "config":
            cfg[key] = _convert(key, val, defaults[key])
    cfg["config"] = preset or "default"
    return cfg


# `--config NAME` is a setting like any other, so unknown-key checks accept it.
DEFAULTS["config"] = "default"


def save(cfg, path):
    """Write the full config next to whatever it produced (DESIGN.md 5)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
