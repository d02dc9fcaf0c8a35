"""The evaluator's settings, with their defaults and meanings, and the kernel languages it
judges: the kernels package's own, so that it stands alone (`kernels.Evaluator(dict(...))`
with any of these keys; the project's config.py shows them in every script's --help).

    ev = kernels.Evaluator(dict(device="cpu", workers=2))   # the rest: DEFAULTS
"""

# Kernel languages and the devices each one's candidates run on; a device's own language
# (--language=auto) is the first whose first device it is; a named language that does not run
# on --device runs on its first device (evaluator.target). A language is one more entry here,
# with its prompt format (prompts.FORMAT) and seeds (tasks/seeds/<language>/). Triton runs on
# the GPU, and on the CPU through its interpreter (correctness only: its timing means nothing).
LANGUAGES = {"cuda": ("cuda",), "cpp": ("cpu",), "triton": ("cuda", "cpu")}


def pick_language(language, device):
    """The language candidates are written in on `device` ('auto': the device's own)."""
    if language == "auto":
        return next(k for k, ds in LANGUAGES.items() if ds[0] == device)
    if device not in LANGUAGES[language]:
        raise ValueError(f"--language={language} runs on {' or '.join(LANGUAGES[language])}, not on {device}")
    return language


# Every setting: (default, one-line meaning); the default's type is the setting's type.
EVALUATOR = ("the evaluator (the kernels package)", dict(
    language=("auto", "auto | cuda | cpp | triton: the kernel language candidates are written in (prompt format, "
                      "build API, seed folder, which solutions match); auto: the --device's own; a language "
                      "that does not run on --device moves the candidates to its device (cpp: the CPU)"),
    gpus=("", "comma list of visible GPU indices for timing workers; \"\" = all"),
    workers=(0, "parallel compile workers; 0 = one per free CPU core"),
    checks_per_gpu=(4, "candidates loaded and checked at once on each GPU (timing always has it alone)"),
    checks_per_cpu=(2, "on the CPU: candidates loaded and checked at once (timing has the CPU alone, "
                       "the others stopped)"),
    cache_dir=("", "build cache; \"\" = $CUDAL1_CACHE or ~/.cache/cudal1"),
    compile_timeout=(600.0, "seconds for importing a candidate (its builds included)"),
    run_timeout=(300.0, "seconds for checking and timing one candidate"),
    cpu_seconds=(0.0, "CPU seconds one job may use, all its processes together; 0 = its timeout x its cores"),
    max_processes=(1024, "processes and threads one job may have at once (0 = no limit)"),
    job_memory_gb=(0.0, "host memory one job may use, all its processes together; 0 = half the machine's"),
    job_disk_gb=(2.0, "GB one job may write to disk, all its processes together, its builds included (0 = no limit)"),
    job_files=(100000, "files and folders one job may have in its work folder and its program's part of the build "
                       "cache (0 = no limit)"),
    settle_seconds=(30.0, "before timing, the longest wait for the processes a candidate started (torch.compile's "
                          "workers) to go idle; what they do after it counts against the candidate"),
    call_timeout=(5.0, "seconds one candidate call (with its synchronize) may always take"),
    call_timeout_factor=(100.0, "... or this many times the reference's warm call, if longer"),
    check_seeds=(2, "weight seeds for the correctness check (at least 2)"),
    check_inputs=(2, "fresh input sets per weight seed"),
    allow_lowp=(False, "accept fp16/bf16/TF32 arithmetic in fp32 tasks"),
    strict_fp32=(False, "TF32 off for reference and candidate (else PyTorch's defaults, as KernelBench "
                        "and CUDA-L1 time: cuDNN convolutions in TF32)"),
    require_kernel=(False, "reject candidates that never call a compiled kernel"),
    allow_init_mismatch=(False, "accept a ModelNew that is right only with Model's weights copied in"),
    allow_distribution_shortcut=(False, "accept (flagged) a ModelNew that is right on the task's inputs "
                                        "but not on normal or uniform(-1, 1) inputs of the same shapes"),
    static_check=(True, "reject candidates whose Python reaches for the evaluator: frames, hooks, signals, "
                        "raw processes, patched modules (kernels/static.py)"),
    reject_reused_output=(False, "reject outputs returned in an earlier call's buffer (else flagged)"),
    timing_rounds=(4, "rounds of interleaved reference/candidate runs (median of round medians)"),
    max_rounds=(10, "rounds at most, with the extra ones while the rounds' speedups disagree"),
    round_seconds=(0.1, "target length of one round (both programs)"),
    min_runs=(3, "timed calls per program per round, at least (programs slower than a round: what fits, >= 1)"),
    max_runs=(100, "timed calls per program per round, at most"),
    spread_limit=(0.05, "rounds whose speedups disagree by more than this (relative range) get more rounds"),
    suspicious_speedup=(10.0, "speedups above this are measured again, longer"),
    confirm_speedup=(1.5, "speedups of at least this are timed again in a fresh worker by a second, minimal "
                          "timer (0 = never)"),
    confirm_margin=(0.5, "... and rejected (unconfirmed) if that speedup is below the first / (1 + this + "
                         "both measurements' spreads)"),
    baseline=("eager", "eager | compile: what the reference is timed as"),
    reference_timing=("separate", "separate: rounds alternate between the candidate's calls and the reference's, "
                                  "timed by a reference timer per device where no candidate code runs (the candidate's "
                                  "process stopped meanwhile), which also judges every output a verdict rests on against "
                                  "its own reference; paired: reference and candidate calls interleaved in the "
                                  "candidate's process (about a fifth more candidates a minute on a GPU; code in that "
                                  "process can reach the reference); apart: the reference timed alone before the "
                                  "candidate's code is loaded, the candidate alone after its checks"),
    reference_retime=(120.0, "apart or separate: seconds a reference time measured in one job (apart: its time; "
                             "separate: the timer's rounds, quiet ones only) is reused for the task's other candidates "
                             "on that GPU (or CPU), then measured again (0: each job times its own)"),
    time_candidates=(True, "false: check correctness only (Stages 1 and 2 ignore speed)"),
    sandbox=(True, "box candidates (sandbox.py); false only to measure what the box costs"),
))
# What else the Evaluator reads of a script's settings: the device candidates run on (--device,
# declared with the scripts' settings in config.py: the policy's device too; cuda:N is cuda here,
# every visible GPU or --gpus), where the run writes (a folder its jobs must not see) and whether
# to draw progress bars.
DEFAULTS = {"device": "auto", "out": "", "progress": True, **{k: d for k, (d, _) in EVALUATOR[1].items()}}
