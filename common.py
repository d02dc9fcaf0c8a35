"""What the stage scripts and evaluate.py all do, kept light (no torch at import, nothing of
the project but config): torchrun helpers, JSONL files, a stage's output folder.

    rank, world, cfg = common.dist_setup(cfg)          # under torchrun: one GPU per rank
    rows = common.all_gather(mine, world)               # every rank's object, in rank order
    out = common.sharded(judge, items, rank, world)     # judge(each rank's share), all results in order
    out, finished = common.start_stage(cfg, "sft")       # out/<config>/sft/, with run_config.json
"""
import atexit
import json
import os
import shutil

import config
# the one progress-bar helper, the evaluator's too (it stands alone in the kernels package)
from kernels.display import progress_bar, say  # noqa: F401 (common.progress_bar, common.say)

# ----------------------------------------------------------------------------------------
# Ranks (torchrun): each rank samples and judges its share on its own GPU


def dist_setup(cfg):
    """-> (rank, world, cfg for this rank). WORLD_SIZE > 1: join the process group, take
    GPU LOCAL_RANK for the policy and for timing, and a share of the compile workers. A
    second call (crl.py running Stages 1 and 2 first) finds the group joined and the cfg
    already set up."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, cfg
    import torch
    import torch.distributed as dist
    if dist.is_initialized():
        return dist.get_rank(), world, cfg
    import datetime
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and cfg["device"] != "cpu"
    # ranks legitimately wait a long time for each other: rank 0 asking teachers and judging
    # Stage 1's dataset, a rank judging slow candidates; the default 10-30 minutes would kill
    # such a run
    timeout = datetime.timedelta(hours=6)
    if cuda:
        torch.cuda.set_device(local)
        # naming the device up front lets NCCL map ranks to GPUs without guessing
        dist.init_process_group("nccl", device_id=torch.device(f"cuda:{local}"), timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    # each rank on its own slice of this host's cores, so its timing workers never share a
    # core with another rank's (the evaluator pins them to the last cores it is given)
    cores = sorted(os.sched_getaffinity(0))
    nlocal = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    share = len(cores) // nlocal
    if share >= 1:
        os.sched_setaffinity(0, cores[local * share:(local + 1) * share])
    if cuda and cfg["device"] == "auto" and cfg["language"] == "auto":
        import kernels  # lazily: the evaluator's own look at the machine
        if kernels.pick_device("auto") == "cpu":  # a GPU but no nvcc: C++ on the host, as --device auto judges
            cfg = dict(cfg, language="cpp")
    cfg = dict(cfg, device=f"cuda:{local}" if cuda else "cpu", gpus=str(local) if cuda else cfg["gpus"])
    return dist.get_rank(), world, cfg


def dist_teardown():
    """Leave the process group, if this process joined one (a script's last step)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def barrier(world):
    if world > 1:
        import torch.distributed as dist
        dist.barrier()


def all_gather(obj, world):
    """Every rank's obj, in rank order (a list of one on a single process)."""
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def sharded(fn, items, rank, world):
    """fn(items[rank::world]) -> a list, one result per item, on each rank; every rank gets
    every result back, in the items' order (the one way work is split over ranks). fn runs on
    every rank, with no items too: it may hold collectives (sampling from an FSDP model)."""
    mine = fn(items[rank::world])
    out = [None] * len(items)
    for r, part in enumerate(all_gather(list(mine), world)):
        out[r::world] = part
    return out


# ----------------------------------------------------------------------------------------
# Progress bars, drawn one way everywhere so that one after another leaves clean lines


# ----------------------------------------------------------------------------------------
# Files


def read_jsonl(path, torn_tail=False, repair=False, numbered=False):
    """The rows of a JSONL file (numbered: (line number, row) pairs); a line that does not
    parse raises ValueError naming path:line. torn_tail: bytes after the last newline (a kill
    mid-append) are dropped, and with repair also cut off the file, or the next append would
    be glued to them."""
    with open(path, "rb") as f:
        raw = f.read()
    end = raw.rfind(b"\n") + 1
    if torn_tail and end < len(raw):
        print(f"{path}: dropped a torn last line (a kill mid-write)")
        if repair:
            with open(path, "r+b") as f:
                f.truncate(end)
        raw = raw[:end]
    rows = []
    for i, line in enumerate(raw.decode().split("\n"), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{i}: not valid JSON ({e})") from None
            rows.append((i, row) if numbered else row)
    return rows


def write_jsonl(path, rows):
    """Write rows atomically (a kill never leaves half a file)."""
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(path + ".tmp", path)


def append_jsonl(path, rows, fsync=False):
    """Append rows; fsync=True when the file is the run's memory (a kill must not lose it)."""
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def stage_dir(cfg, stage):
    """Where a stage writes: out/<config>/<stage>/."""
    return os.path.join(cfg["out"], cfg["config"], stage)


def has_checkpoint(out):
    """A stage folder holds weights (a model or a LoRA adapter) and the training state."""
    weights = ("config.json", "adapter_config.json")
    return os.path.exists(os.path.join(out, "train_state.pt")) and \
        any(os.path.exists(os.path.join(out, w)) for w in weights)


def is_done(out):
    """True when a stage folder holds a finished checkpoint."""
    if not has_checkpoint(out):
        return False
    import torch
    # mmap: reading one flag must not pull a large model's optimizer state into memory
    state = torch.load(os.path.join(out, "train_state.pt"), map_location="cpu", weights_only=False, mmap=True)
    return bool((state.get("extra") or {}).get("done"))


# The settings that make a stage folder what it is. Its checkpoint and data answer for these
# alone: resumed or reused under other values, a folder hands back another run's model as if
# it were this command's (issue "first hour": `crl.py --config small --model X` after a tiny
# model run reported the tiny model's 20 steps as X's). Each, and why:
#   model                  the weights, and a real model's tokenizer
#   tiny_dim .. tiny_vocab the tiny model's shape and tokenizer (compared when both are the tiny model)
#   lora_rank              adapters or full weights, and the adapters' shape
#   lora_alpha, lora_targets  the adapters' scale and the modules they sit on (when both have adapters)
#   fsdp                   the optimizer state is saved in FSDP's layout (by parameter name), not AdamW's
#   init_from              the weights the stage started from (and Stage 3's KL reference); an
#                          omitted --init_from is a different start (the previous stage, or --model)
#   tasks                  the task set every stage samples, judges and reports on: a dataset, a
#                          database or a log of one set carried on with another mixes the two
#   language               (as stated_language reads it) the prompt format, the kernels in the
#                          data, the tiny model's tokenizer
# Out, on purpose: only (picks tasks of the same set: narrowing or widening a resumed run is
# legitimate), config and exemplars (they name the folder, so always agree), seed (the
# checkpoint holds the weights and RNG state), dtype (either loads the weights, and
# optim.optimizer takes either's optimizer state), teachers (the dataset on disk is what a
# resume uses, as sft.py says), and rates, lengths, step counts and evaluator settings: they
# change how a run goes on, not what it continues (--crl_steps is how Stage 3 goes on).
MADE_WITH = ("model", "tiny_dim", "tiny_layers", "tiny_heads", "tiny_vocab", "lora_rank", "lora_alpha",
             "lora_targets", "fsdp", "init_from", "tasks", "language")


def stated_language(cfg):
    """The kernel language --device and --language name, as kernels.target reads them but
    without the machine: "auto" where both are auto (the machine's own). A named language is
    the language whatever the device (it moves candidates to a device it runs on). A
    run_config.json written before --backend became --device names where candidates ran in
    "backend": named, its own language; auto beside a named --device (the policy's; torchrun
    ranks save theirs), the machine's own, as kernels.pick_device("auto") reads this machine."""
    if cfg["language"] != "auto":
        return cfg["language"]
    device = cfg["device"]
    if "backend" in cfg:  # an older folder's
        if cfg["backend"] != "auto" or device == "auto":
            device = cfg["backend"]
        else:
            import kernels  # lazily: only for such folders (it imports torch to look for a GPU)
            device = kernels.pick_device("auto")
    if device == "auto":
        return "auto"
    return config.pick_language("auto", "cuda" if device.startswith("cuda") else device)


def _show(key, value):
    text = f"--{key}={repr(value) if isinstance(value, str) else str(value).lower()}"
    if key == "language" and value == "auto":
        text += " (the device's own)"
    if key in ("model", "init_from") and not value:
        text += " (the tiny built-in model)" if key == "model" else " (none: the previous stage's output)"
    return text


def made_differently(saved, cfg):
    """The MADE_WITH settings in which a folder's saved config and cfg differ -> [(key, saved
    value, cfg's value)]. A key an older folder lacks counts as its default."""
    saved = dict(config.DEFAULTS, **saved)
    both_tiny = saved["model"] == cfg["model"] == ""
    both_lora = saved["lora_rank"] > 0 and cfg["lora_rank"] > 0
    out = []
    for key in MADE_WITH:
        if (key.startswith("tiny_") and not both_tiny) or (key in ("lora_alpha", "lora_targets") and not both_lora):
            continue
        if key == "language":  # auto against a named one differs: what auto was on the folder's machine is not saved
            a, b = stated_language(saved), stated_language(cfg)
        else:
            a, b = saved[key], cfg[key]
            if key in ("model", "init_from", "tasks"):  # out/small/sft/ and out/small/sft are one folder
                a, b = (os.path.normpath(v) if v else v for v in (a, b))
        if a != b:
            out.append((key, a, b))
    return out


def check_resumable(cfg, out, starts_from=False):
    """Raise ValueError, one line, when folder `out` holds something a run would resume or reuse
    (a checkpoint, data) and its run_config.json has other MADE_WITH settings than cfg.
    starts_from: `out` is an earlier stage's output this stage starts from; init_from is this
    stage's own start, so it is not compared."""
    path = os.path.join(out, "run_config.json")
    if not os.path.exists(path) or not _leftovers(out):
        return
    try:
        with open(path) as f:
            saved = json.load(f)
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); delete {out} to start over") from None
    diff = [d for d in made_differently(saved, cfg) if not (starts_from and d[0] == "init_from")]
    if diff:
        what = f"{out}, an earlier stage this command builds on," if starts_from else out
        raise ValueError(f"{what} was made with {', '.join(_show(k, a) for k, a, _ in diff)}; this command has "
                         f"{', '.join(_show(k, b) for k, _, b in diff)}. Use another --out, or delete {out} to start "
                         f"over (its settings: {path})")


def start_stage(cfg, stage, write_config=True):
    """Open a stage's folder, out/<config>/<stage>/, saving the config it runs with (under
    torchrun rank 0 alone writes) -> (folder, finished). finished: the folder already holds
    a completed checkpoint, which the stage reuses (nothing is written then). A folder made
    with other MADE_WITH settings is refused (check_resumable), before its run_config.json is
    overwritten."""
    out = stage_dir(cfg, stage)
    check_resumable(cfg, out)
    if is_done(out):
        print(f"{stage}: {out} is finished (delete it to run again)")
        return out, True
    os.makedirs(out, exist_ok=True)
    if write_config:
        config.save(cfg, os.path.join(out, "run_config.json"))
        atexit.register(_drop_if_empty, out)
    return out, False


def _leftovers(out):
    """What a stage folder holds besides its run_config.json: files with something in them,
    folders with something in them (an empty samples/ is nothing)."""
    def full(p):
        try:
            return any(full(os.path.join(p, n)) for n in os.listdir(p)) if os.path.isdir(p) else os.path.getsize(p) > 0
        except OSError:  # unreadable: count it as something
            return True
    return [n for n in os.listdir(out) if n != "run_config.json" and full(os.path.join(out, n))] \
        if os.path.isdir(out) else []


def _drop_if_empty(out):
    """At exit: a stage folder that holds only its run_config.json and empty files (the run
    failed before it produced anything) is removed, so nothing looks half done."""
    try:
        if os.path.isdir(out) and not _leftovers(out):
            shutil.rmtree(out)
            os.rmdir(os.path.dirname(out))  # out/<config> too, if nothing else is in it
    except OSError:
        pass
